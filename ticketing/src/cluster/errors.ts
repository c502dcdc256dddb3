/**
 * Why a cluster node cannot use etcd at all: errors that waiting does not cure, unlike an etcd
 * that is down or electing. A node that meets one stops (cluster/node.ts) and the server reports
 * it as its `error` event. None of them carries the password.
 */
import { TicketError } from '../errors.js';

/** The base of the three below: match on `code`. `endpoint` is set when one etcd URL is to blame. */
export abstract class EtcdAccessError extends TicketError {
  constructor(
    message: string,
    readonly endpoint?: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** etcd refused the user: a wrong password or an unknown user, a user given to an etcd without
 * auth, or no user given to an etcd with auth on. */
export class EtcdAuthError extends EtcdAccessError {
  readonly code = 'ETICKETETCDAUTH';
}

/** The user may not read and write the node's prefix (etcd's `permission denied`). */
export class EtcdPermissionError extends EtcdAccessError {
  readonly code = 'ETICKETETCDPERMISSION';
}

/** The TLS handshake with an etcd endpoint failed: its certificate is not trusted by the CA or
 * does not name the host, or etcd refused this node's client certificate (or its absence). Or
 * this node's own certificate, key or CA could not be loaded (no endpoint set). */
export class EtcdTlsError extends EtcdAccessError {
  readonly code = 'ETICKETETCDTLS';
}
