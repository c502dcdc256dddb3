/**
 * Errors are classes with a stable string `code` (match on `code`, not on the message), in the
 * style of undici. Every client error says whether the request could have taken effect:
 * - `IndeterminateError`: it may have (bytes of it were sent, no definitive reply came back).
 * - `AuthFailedError`, `CapacityError`: it did not (the server refused the connection it was sent
 *   on before processing any request of it).
 * - everything else: it did not (it was refused before any byte of it left this process).
 */
import { CodedError } from '#kernel';

/** Every Ticketing error: the one coded-error base shared with the file lease (src/kernel/errors.ts),
 * so `instanceof` works across two installed copies. Codes follow the lease's style (`ELEASEHELD`). */
export abstract class TicketError extends CodedError {}

/** Why an outcome could not be known. */
export type IndeterminateReason =
  /** The connection closed, failed or was closed by a fatal reply before the reply came. */
  | 'connection-lost'
  /** The caller's signal aborted after the request was sent. */
  | 'aborted'
  /** No reply within waitMs + responseTimeoutMs. */
  | 'response-timeout'
  /** The client was destroyed with the request in flight. */
  | 'destroyed';

/**
 * The request was sent (at least one byte of it) and no definitive reply arrived: it may or may
 * not have taken effect. For an acquire that means the key MAY be held under `owner` until its
 * lease runs out; when the grant's token was seen (`token`), the client already sent a
 * best-effort release for it. Never retry an acquire with the same owner as a status query.
 */
export class IndeterminateError extends TicketError {
  readonly code = 'ETICKETINDETERMINATE';
  constructor(
    message: string,
    readonly op: 'acquire' | 'release' | 'keep' | 'publish',
    readonly key: string,
    /** The acquire's owner (acquires only). */
    readonly owner: string | undefined,
    /** The grant's token if it was parsed (acquire), or the token being released, kept or
     * published under. */
    readonly token: bigint | undefined,
    readonly reason: IndeterminateReason,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/**
 * The request did not take effect: the server refused the connection it was sent (or queued) on
 * before it processed any request of it (`E auth_failed`, `E capacity`, a certificate), or the
 * client never sent it because the connection could not carry it (a TLS mismatch, a leader outside
 * `addresses`). The caller holds nothing. Retrying is safe (for capacity after a pause; for the
 * others only once the configuration is fixed).
 */
export abstract class RefusedError extends TicketError {
  constructor(
    message: string,
    /** `observe`: an observation, which ends with the refusal (client.observe). */
    readonly op: 'acquire' | 'release' | 'keep' | 'publish' | 'observe',
    readonly key: string,
    /** The acquire's owner (acquires only). */
    readonly owner: string | undefined,
    /** The token being released, kept or published under. */
    readonly token: bigint | undefined,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** `E auth_failed`: the secret was wrong or missing. `cause` is the server's `ServerError`. */
export class AuthFailedError extends RefusedError {
  readonly code = 'ETICKETAUTHFAILED';
}

/** `E capacity`: the server was at `--max-connections`. `cause` is the server's `ServerError`. */
export class CapacityError extends RefusedError {
  readonly code = 'ETICKETCAPACITY';
}

/**
 * TLS refused: the server's certificate did not verify (expired, wrong name, unknown CA), or the
 * server refused ours during the handshake. No request on that connection was processed: it did
 * not take effect. `cause` is the TLS error (its `code`, e.g. `CERT_HAS_EXPIRED`). Retrying does
 * not help until the certificates are fixed.
 */
export class CertificateError extends RefusedError {
  readonly code = 'ETICKETCERT';
}

/**
 * A node named a leader (`M <host:port>`) that is not among the client's `addresses` (for
 * instance: the client was given one address of a cluster, or a Service in front of it). The
 * client follows a redirect only to an address it was given, so the request was not sent. Fix:
 * list every node of the cluster in `addresses`, as the nodes advertise them (`--advertise`).
 */
export class UnlistedLeaderError extends RefusedError {
  readonly code = 'ETICKETUNLISTEDLEADER';
}

/**
 * The server and the client disagree about TLS: the server speaks TLS and the client has no `tls`
 * option, or the client has one and the server speaks plain text. The request was not sent.
 */
export class TlsMismatchError extends RefusedError {
  readonly code = 'ETICKETTLSMISMATCH';
}

/** An acquire with the same (key, owner), or a keep or publish with the same (key, token), is already pending on
 * this client: a second one would make the replies ambiguous, so it is refused before it is sent. */
export class DuplicateRequestError extends TicketError {
  readonly code = 'ETICKETDUPLICATE';
  constructor(
    message: string,
    readonly key: string,
    /** The acquire's owner (acquires only). */
    readonly owner: string | undefined,
    /** The keep's token (keeps only). */
    readonly token?: bigint,
  ) {
    super(message);
  }
}

/**
 * The server answered `C`: the acquire's mode does not fit the key's kind (a semaphore asked with
 * another N, `x`/`s` on a semaphore, N on a lock held or awaited in `x`/`s` mode). Definitive and at once, whatever `waitMs`: nothing was granted or queued.
 */
export class ModeConflictError extends TicketError {
  readonly code = 'ETICKETMODECONFLICT';
  constructor(
    message: string,
    readonly key: string,
    readonly owner: string,
  ) {
    super(message);
  }
}

/**
 * The lock is no longer held under this token: the server answered `G` to a keep (released,
 * expired, taken over, or never granted), or, for a `hold()`, its local deadline passed before a
 * keep was confirmed (the server may already have let it go). Definitive: stop using the token.
 */
export class LockLostError extends TicketError {
  readonly code = 'ETICKETLOST';
  constructor(
    message: string,
    readonly key: string,
    readonly token: bigint,
    /** `gone`: the server said so; `deadline`: the local deadline passed without a confirmed keep. */
    readonly reason: 'gone' | 'deadline',
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/**
 * The server refused to observe the key (`U <key> busy`): the connection or the server is at its
 * limit of observations (docs/ticketing-election.md). The observation ended; nothing else changed.
 */
export class ObservationLimitError extends TicketError {
  readonly code = 'ETICKETOBSERVELIMIT';
  constructor(
    message: string,
    readonly key: string,
  ) {
    super(message);
  }
}

/** `hold()` did not get the lock: it was held and not released within `waitMs` (`timed-out`), or
 * the server was at a queue limit (`busy`). Nothing is held. */
export class NotAcquiredError extends TicketError {
  readonly code = 'ETICKETNOTACQUIRED';
  constructor(
    message: string,
    readonly key: string,
    readonly owner: string,
    readonly status: 'timed-out' | 'busy',
  ) {
    super(message);
  }
}

/** `TicketLease` (the `SessionLease` port): the key is held by another (acquire), or the grant is no
 * longer held (renew). The port's code, so code written against the port handles it as it does the
 * file lease's `LeaseHeldError`. */
export class LeaseHeldError extends TicketError {
  readonly code = 'ELEASEHELD';
  constructor(
    message: string,
    readonly sessionId: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** No connection could be made (or kept) to send the request within `connectTimeoutMs`. The
 * request was never sent. `cause` is the last connection error. */
export class ConnectError extends TicketError {
  readonly code = 'ETICKETCONNECT';
}

/** `ticketing run` needs the flocklease package, an optional peer dependency: its native supervisor
 * runs the command (and stops it if `run` dies). Thrown before the lock is asked for. */
export class RunUnsupportedError extends TicketError {
  readonly code = 'ETICKETRUNUNSUPPORTED';
}

/** The client was closed or destroyed before the request was sent. */
export class ClientClosedError extends TicketError {
  readonly code = 'ETICKETCLOSED';
}

/** A server's `E <code> [detail]` reply. Seen as the `cause` of the errors above. */
export class ServerError extends TicketError {
  readonly code = 'ETICKETSERVER';
  constructor(
    /** The wire code, e.g. `auth_failed`, `not_active`, `capacity`. */
    readonly serverCode: string,
    readonly detail: string,
  ) {
    super(detail ? `server error ${serverCode}: ${detail}` : `server error ${serverCode}`);
  }
}

/** The server sent something this client cannot match to a request: a malformed, oversized or
 * unknown line, or a reply nobody is waiting for. Fatal to the connection. Seen as a `cause`. */
export class ProtocolError extends TicketError {
  readonly code = 'ETICKETPROTOCOL';
  constructor(
    message: string,
    readonly line?: string,
  ) {
    super(message);
  }
}
