/**
 * The error a sent request settles with when its connection ends before its reply: what the
 * caller may conclude depends on why the connection ended (errors.ts says what each one means).
 */
import {
  AuthFailedError,
  CapacityError,
  CertificateError,
  IndeterminateError,
  type IndeterminateReason,
  LockLostError,
  ModeConflictError,
  type TicketError,
} from '../errors.js';
import type { Pending } from './pending.js';

/** The E codes that refuse a connection before any request of it is processed. */
export const REFUSALS = new Map<string, typeof AuthFailedError | typeof CapacityError | typeof CertificateError>([
  ['auth_failed', AuthFailedError],
  ['capacity', CapacityError],
  ['bad_certificate', CertificateError],
]);

export type ConnectionEnd =
  /** The server refused the connection before processing any request of it. */
  | {
      readonly kind: 'refused';
      readonly error: typeof AuthFailedError | typeof CapacityError | typeof CertificateError;
      readonly cause: unknown;
    }
  /** The caller aborted this request after it was sent (the connection was closed for it). */
  | { readonly kind: 'aborted'; readonly cause: unknown }
  /** Anything else: the request may have taken effect. */
  | { readonly kind: 'lost'; readonly reason: IndeterminateReason; readonly cause: unknown };

/** `token`: a grant's token salvaged from a half-received reply (acquires only). */
export function endedRequestError(p: Pending, end: ConnectionEnd, token?: bigint): TicketError {
  const acquire = p.kind === 'acquire';
  const what = acquire ? `acquire ${p.key} (owner ${p.owner})` : `${p.kind} ${p.key} token ${p.token}`;
  const owner = acquire ? p.owner : undefined;
  switch (end.kind) {
    case 'refused':
      return new end.error(
        `${what} was refused (${describe(end.cause)}): it did not take effect`,
        p.kind,
        p.key,
        owner,
        acquire ? undefined : p.token,
        {
          cause: end.cause,
        },
      );
    case 'aborted':
      return new IndeterminateError(
        acquire
          ? `${what} was aborted after it was sent: it may or may not hold the key`
          : `${what} was aborted after it was sent`,
        p.kind,
        p.key,
        owner,
        acquire ? token : p.token,
        'aborted',
        { cause: end.cause },
      );
    case 'lost':
      return new IndeterminateError(
        `${what}: no definitive reply (${describe(end.cause)}); it may or may not ${acquire ? 'hold the key' : p.kind === 'keep' ? 'have kept it' : 'have released'}`,
        p.kind,
        p.key,
        owner,
        acquire ? token : p.token,
        end.reason,
        { cause: end.cause },
      );
  }
}

/** The server's `G`: the key is not held under this token. */
export function lockGone(key: string, token: bigint): LockLostError {
  return new LockLostError(
    `${key} is not held under token ${token} (released, expired, taken over, or never granted)`,
    key,
    token,
    'gone',
  );
}

function describe(cause: unknown): string {
  return cause instanceof Error ? cause.message : String(cause);
}

/** A `C` reply: the acquire's mode does not fit the key's kind. */
export function modeConflict(key: string, owner: string): ModeConflictError {
  return new ModeConflictError(`${key}: the requested mode does not fit the key's current kind`, key, owner);
}

/** Does a grant's slot answer a request for `permits` (0: `x` or `s`, which get no slot)? */
export function slotAnswers(slot: number | undefined, permits: number): boolean {
  return slot === undefined ? permits === 0 : slot < permits;
}
