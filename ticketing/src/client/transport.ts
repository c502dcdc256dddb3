/** A lane's socket: plain TCP, or TLS with the client's `tls` options; and which TLS errors are
 * certificate refusals (nothing on that connection was processed). */
import net from 'node:net';
import tls from 'node:tls';

export interface Transport {
  readonly socket: net.Socket;
  /** The event after which requests may be written. */
  readonly ready: 'connect' | 'secureConnect';
}

export function openSocket(host: string, port: number, tlsOptions: tls.ConnectionOptions | undefined): Transport {
  const socketOptions = { noDelay: true, keepAlive: true, keepAliveInitialDelay: 30_000 };
  if (tlsOptions === undefined) return { socket: net.connect({ host, port, ...socketOptions }), ready: 'connect' };
  const servername = tlsOptions.servername ?? (net.isIP(host) === 0 ? host : undefined);
  const socket = tls.connect({ ...socketOptions, ...tlsOptions, host, port, servername });
  return { socket, ready: 'secureConnect' };
}

/** Verification codes of OpenSSL (as Node reports them) and Node's own name check. */
const VERIFY_CODES = new Set([
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_REVOKED',
  'CERT_REJECTED',
  'CERT_UNTRUSTED',
  'CERT_SIGNATURE_FAILURE',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'INVALID_CA',
  'INVALID_PURPOSE',
  'HOSTNAME_MISMATCH',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);
/** The server's handshake alerts about our certificate (TLS 1.3 sends them after our side of the
 * handshake finished, so requests may have been written: the server processed none of them). */
const REFUSAL_ALERT = /^ERR_SSL_\w*ALERT_(BAD_CERTIFICATE|UNSUPPORTED_CERTIFICATE|CERTIFICATE_\w+|UNKNOWN_CA)$/;

export function isCertificateError(error: unknown): boolean {
  const code = (error as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' && (VERIFY_CODES.has(code) || REFUSAL_ALERT.test(code));
}
