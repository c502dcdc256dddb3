/**
 * The etcd client for cluster mode, with our own fault handling, TLS and user, and the check that
 * etcd lets this node use its prefix at all. Loaded only by `serve --cluster` (a dynamic import),
 * so the client and the single-mode server never load etcd3 or gRPC.
 *
 * etcd3's defaults retry 3 times behind a per-host circuit breaker that stays open 5 s after 3
 * failures: a ~1 s etcd election became 5–6 s of failed calls. Here a host that fails is skipped
 * for `hostCooldownMs` only, a failed call is retried at once on the next host (our writes are
 * absolute puts and deletes under a guard, so a retry is idempotent), and every unary call has a
 * deadline of `callTimeoutMs`.
 */
import { X509Certificate } from 'node:crypto';
import { isIP } from 'node:net';
import { connect as connectTls, createSecureContext } from 'node:tls';
import type { Etcd3 } from 'etcd3';
import { EtcdAccessError, EtcdAuthError, EtcdPermissionError, EtcdTlsError } from './errors.js';
import type { KeyLayout } from './store.js';

/** TLS to etcd (PEM). Without `ca` the system's CAs verify etcd's certificate. */
export interface EtcdTlsOptions {
  readonly ca?: string | Buffer | undefined;
  /** This node's client certificate and its key: both or neither. */
  readonly cert?: string | Buffer | undefined;
  readonly key?: string | Buffer | undefined;
}

export interface EtcdClientOptions {
  /** `http://host:port` or (all of them) `https://host:port` URLs. */
  readonly hosts: readonly string[];
  readonly callTimeoutMs: number;
  readonly hostCooldownMs: number;
  /** Only with https hosts (which use TLS even without it). */
  readonly tls?: EtcdTlsOptions | undefined;
  readonly user?: { readonly name: string; readonly password: string } | undefined;
}

/** The subset of cockatiel's IPolicy that etcd3 calls. */
interface MinimalPolicy {
  execute<T>(fn: (context: { signal: AbortSignal; attempt: number }) => PromiseLike<T> | T): Promise<T>;
}

class HostSkippedError extends Error {
  /** etcd3's connection pool moves on to the next host for this (cockatiel's marker). */
  readonly isBrokenCircuitError = true;
}

/**
 * Checks the endpoints, TLS and user together (TypeError), and loads the TLS material once, so
 * that a bad certificate, key or CA fails here (EtcdTlsError) and not at the first connection.
 */
export function checkEtcdClientOptions({ hosts, tls, user }: Pick<EtcdClientOptions, 'hosts' | 'tls' | 'user'>): void {
  const secure = hosts.filter((url) => url.startsWith('https://')).length;
  if (hosts.length === 0) throw new TypeError('etcd: no endpoints');
  if (secure !== 0 && secure !== hosts.length) throw new TypeError('etcd endpoints: all http:// or all https://');
  if (tls !== undefined) {
    if (secure === 0) throw new TypeError('etcd TLS options need https:// endpoints');
    if ((tls.cert === undefined) !== (tls.key === undefined))
      throw new TypeError('etcd client certificate and key: both or neither');
    try {
      createSecureContext({ ca: tls.ca, cert: tls.cert, key: tls.key });
    } catch (error) {
      throw new EtcdTlsError(`etcd TLS material: ${(error as Error).message}`, undefined, { cause: error });
    }
  }
  if (user !== undefined && (typeof user.name !== 'string' || user.name === '' || typeof user.password !== 'string'))
    throw new TypeError('etcd user: a name and a password');
  if (user?.password === '') throw new TypeError('etcd user: the password is empty');
}

let etcd3: typeof import('etcd3') | undefined;

export async function createEtcdClient(options: EtcdClientOptions): Promise<Etcd3> {
  etcd3 = await import('etcd3');
  const { isRecoverableError } = etcd3;
  const never = new AbortController().signal;
  const hostPolicy = (): MinimalPolicy => {
    let skipUntil = 0;
    return {
      async execute(fn) {
        if (performance.now() < skipUntil) throw new HostSkippedError('etcd host skipped after a failure');
        try {
          return await fn({ signal: never, attempt: 0 });
        } catch (error) {
          if (isRecoverableError(error as Error)) skipUntil = performance.now() + options.hostCooldownMs;
          throw error;
        }
      },
    };
  };
  const attempts = options.hosts.length;
  const globalPolicy: MinimalPolicy = {
    async execute(fn) {
      for (let attempt = 0; ; attempt++) {
        try {
          return await fn({ signal: never, attempt });
        } catch (error) {
          if (attempt + 1 >= attempts || !isRecoverableError(error as Error)) throw error;
        }
      }
    },
  };
  const { tls, user } = options;
  const secure = options.hosts[0]?.startsWith('https:') === true;
  const pem = (value: string | Buffer | undefined): Buffer | undefined =>
    value === undefined ? undefined : Buffer.from(value);
  return new etcd3.Etcd3({
    hosts: [...options.hosts],
    dialTimeout: options.callTimeoutMs,
    defaultCallOptions: (context) => (context.isStream ? {} : { deadline: Date.now() + options.callTimeoutMs }),
    faultHandling: {
      host: hostPolicy as never,
      global: globalPolicy as never,
    },
    ...(secure && tls !== undefined
      ? {
          credentials: {
            // etcd3's type wants a CA; gRPC's createSsl takes null for the system's CAs.
            rootCertificate: pem(tls.ca) ?? (null as unknown as Buffer),
            privateKey: pem(tls.key),
            certChain: pem(tls.cert),
          },
        }
      : {}),
    ...(user === undefined ? {} : { auth: { username: user.name, password: user.password } }),
  });
}

/**
 * Resolves when etcd lets this node read and write everything under `layout.prefix`. Rejects with
 * an EtcdAccessError when it never will (TLS refused, user refused, permission denied), and with
 * etcd3's own error when etcd could not be asked (down, electing): worth asking again.
 */
export async function checkEtcdAccess(client: Etcd3, options: EtcdClientOptions, layout: KeyLayout): Promise<void> {
  if (options.hosts[0]?.startsWith('https:') === true) {
    await Promise.all(options.hosts.map((url) => checkTls(url, options.tls ?? {}, options.callTimeoutMs)));
  }
  try {
    // etcd checks the permission of every operation of a txn, on both branches, before it runs
    // any: this reads the prefix and may not write anything (a create revision is never < 0).
    await client.kv.txn({
      compare: [{ key: layout.leader, target: 'Create', result: 'Less', create_revision: 0 }],
      success: [{ request_delete_range: { key: layout.all, range_end: layout.allEnd } }],
      failure: [{ request_range: { key: layout.all, range_end: layout.allEnd, limit: 1, keys_only: true } }],
    });
  } catch (error) {
    throw asAccessError(error, options.user?.name, layout.prefix, options.tls?.cert) ?? error;
  }
}

/**
 * `error` (from an etcd call) as the EtcdAccessError it means, or undefined when it is not one
 * (etcd down or electing, a deadline, …).
 */
export function asAccessError(
  error: unknown,
  user: string | undefined,
  prefix: string,
  /** This node's client certificate: with no user, etcd takes its CN as the user. */
  certificate?: string | Buffer,
): EtcdAccessError | undefined {
  if (error instanceof EtcdAccessError) return error;
  if (etcd3 === undefined || !(error instanceof Error)) return undefined;
  const options = { cause: error };
  const cn = user === undefined && certificate !== undefined ? commonName(certificate) : undefined;
  const who =
    user !== undefined
      ? `user ${JSON.stringify(user)}`
      : cn !== undefined
        ? `user ${JSON.stringify(cn)} (its client certificate's CN)`
        : 'this node (no user given)';
  if (error instanceof etcd3.EtcdAuthenticationFailedError)
    return new EtcdAuthError(`etcd refused ${who}: wrong password or no such user`, undefined, options);
  // No user and no certificate: etcd (auth on) treats the node as no one, and denies it everything.
  // That is a missing login, not a missing role.
  if (error instanceof etcd3.EtcdPermissionDeniedError && user === undefined && cn === undefined)
    return needsUser(options);
  if (error instanceof etcd3.EtcdPermissionDeniedError)
    return new EtcdPermissionError(`etcd: ${who} may not read and write the prefix ${prefix}`, undefined, options);
  if (error.message.includes('authentication is not enabled'))
    return new EtcdAuthError(`etcd has authentication off: ${who} cannot log in`, undefined, options);
  if (error.message.includes('user name is empty')) return needsUser(options);
  return undefined;
}

function commonName(certificate: string | Buffer): string | undefined {
  try {
    return /^CN=(.*)$/m.exec(new X509Certificate(certificate).subject)?.[1];
  } catch {
    return undefined;
  }
}

function needsUser(options: ErrorOptions): EtcdAuthError {
  return new EtcdAuthError(
    'etcd has authentication on: this node needs a user (--etcd-user), or a client certificate whose CN is one',
    undefined,
    options,
  );
}

/** The HTTP/2 client preface and an empty SETTINGS frame: what makes etcd answer at all. */
const HTTP2_PREFACE = Buffer.concat([
  Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1'),
  Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]),
]);

/**
 * One TLS connection to `url` with the node's material, closed at etcd's first answer: rejects
 * with an EtcdTlsError when the handshake fails (gRPC would only report etcd as unavailable, and
 * be retried forever). Under TLS 1.3 a refused client certificate shows only as an alert after
 * the handshake, hence the preface and the wait for etcd's reply. Resolves otherwise, unreachable
 * included.
 */
async function checkTls(url: string, tls: EtcdTlsOptions, timeoutMs: number): Promise<void> {
  const { hostname, port } = new URL(url);
  const host = hostname.replace(/^\[|\]$/g, '');
  await new Promise<void>((resolve, reject) => {
    const socket = connectTls({
      host,
      port: Number(port),
      ...(isIP(host) === 0 ? { servername: host } : {}),
      ca: tls.ca,
      cert: tls.cert,
      key: tls.key,
      ALPNProtocols: ['h2'],
    });
    const finish = (error?: Error): void => {
      clearTimeout(timer);
      socket.destroy();
      if (error === undefined) resolve();
      else reject(new EtcdTlsError(`etcd ${url}: TLS: ${describeTlsFailure(error)}`, url, { cause: error }));
    };
    const timer = setTimeout(finish, timeoutMs);
    socket.once('secureConnect', () => socket.write(HTTP2_PREFACE));
    socket.once('data', () => finish());
    socket.once('close', () => finish());
    socket.once('error', (error: NodeJS.ErrnoException) => finish(isTlsFailure(error) ? error : undefined));
  });
}

/** OpenSSL's one-line reason, and what an alert from etcd means. */
function describeTlsFailure(error: Error & { code?: string; reason?: string }): string {
  const reason = error.reason ?? error.message;
  return /^ERR_SSL_.*ALERT/.test(error.code ?? '')
    ? `etcd refused this node's client certificate (or its absence): ${reason}`
    : reason;
}

/** A handshake failure: OpenSSL's errors and alerts (`ERR_SSL_…`), Node's (`ERR_TLS_…`), and the
 * certificate verification codes (`UNABLE_TO_VERIFY_LEAF_SIGNATURE`, `CERT_HAS_EXPIRED`, …), as
 * against a socket error (`ECONNREFUSED`, with a `syscall`). */
function isTlsFailure(error: NodeJS.ErrnoException): boolean {
  const code = error.code ?? '';
  if (/^ERR_(SSL|TLS|OSSL)_/.test(code)) return true;
  return error.syscall === undefined && /^[A-Z][A-Z0-9]*(_[A-Z0-9]+)+$/.test(code) && !code.startsWith('ERR_');
}
