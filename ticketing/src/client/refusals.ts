/**
 * Why a lane refuses requests without sending them, or refuses those a refused connection took:
 * the server's refusal codes, and what the client says when the connection cannot carry a request
 * at all (each message says what to change).
 */
import { AuthFailedError, CapacityError, CertificateError, ConnectError } from '../errors.js';
import { speaksTls } from '../tls-sniff.js';
import type { Endpoint } from './options.js';

/** The E codes that refuse a connection before any request of it is processed. */
export const REFUSALS = new Map<string, typeof AuthFailedError | typeof CapacityError | typeof CertificateError>([
  ['auth_failed', AuthFailedError],
  ['capacity', CapacityError],
  ['bad_certificate', CertificateError],
]);

/** A node named a leader the client may not follow (`M` outside the allowlist). */
export function unlistedLeader(leader: string, endpoints: readonly Endpoint[], cause: Error): Error {
  return new Error(
    `the cluster's leader is ${leader}, which is not among this client's addresses ` +
      `(${endpoints.map((e) => e.text).join(', ')}): list every node of the cluster in \`addresses\`, as the ` +
      'nodes advertise them (a client follows a leader only to an address it was given)',
    { cause },
  );
}

/** A TLS client's peer answered in plain text. */
export function plainTextPeer(address: string): Error {
  return new Error(
    `${address} does not speak TLS (it answered in plain text): drop the tls option, or start the server ` +
      'with --tls-cert and --tls-key',
  );
}

/** Calls `then` with the advice if `endpoint` speaks TLS (asked of a plain-text client's peer
 * that said nothing). */
export function whenTlsPeer(endpoint: Endpoint, then: (advice: Error) => void): void {
  void speaksTls(endpoint.host, endpoint.port).then((tls) => {
    if (!tls) return;
    then(
      new Error(
        `${endpoint.text} speaks TLS and this client has no tls option: pass tls (with the server's CA: ` +
          '`tls: { ca }`) to TicketClient, or --tls-ca to the ticketing command',
      ),
    );
  });
}

/** An unsent request's wait for a serving node ran out. */
export function notSentInTime(waitedMs: number, lastTried: Endpoint | undefined, cause: unknown): ConnectError {
  return new ConnectError(
    `no serving node (last tried: ${lastTried?.text ?? 'none'}) within ${waitedMs} ms: the request was not sent`,
    { cause },
  );
}
