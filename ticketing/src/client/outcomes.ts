/**
 * The error a sent request settles with when its connection ends before its reply: what the
 * caller may conclude depends on why the connection ended (errors.ts says what each one means).
 */
import {
  type AuthFailedError,
  type CapacityError,
  type CertificateError,
  IndeterminateError,
  type IndeterminateReason,
  LockLostError,
  type TicketError,
  TlsMismatchError,
  UnlistedLeaderError,
} from '../errors.js';
import type { Pending, PendingAcquire } from './pending.js';
import { parsePartialGrant } from '../protocol.js';

export type ConnectionEnd =
  /** The server refused the connection before processing any request of it. */
  | {
      readonly kind: 'refused';
      readonly error: RefusalClass;
      readonly cause: unknown;
    }
  /** The caller aborted this request after it was sent (the connection was closed for it). */
  | { readonly kind: 'aborted'; readonly cause: unknown }
  /** Anything else: the request may have taken effect. */
  | { readonly kind: 'lost'; readonly reason: IndeterminateReason; readonly cause: unknown };

export type RefusalClass =
  | typeof AuthFailedError
  | typeof CapacityError
  | typeof CertificateError
  | typeof TlsMismatchError
  | typeof UnlistedLeaderError;

const MAY_HAVE = { release: 'have released', keep: 'have kept it', publish: 'have published' } as const;

/** `token`: a grant's token salvaged from a half-received reply (acquires only). */
export function endedRequestError(p: Pending, end: ConnectionEnd, token?: bigint): TicketError {
  const acquire = p.kind === 'acquire';
  const what = acquire ? `acquire ${p.key} (owner ${p.owner})` : `${p.kind} ${p.key} token ${p.token}`;
  const owner = acquire ? p.owner : undefined;
  switch (end.kind) {
    case 'refused':
      return new end.error(
        end.error === TlsMismatchError || end.error === UnlistedLeaderError
          ? `${what} was not sent: ${describe(end.cause)}`
          : `${what} was refused (${describe(end.cause)}): it did not take effect`,
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
        `${what}: no definitive reply (${describe(end.cause)}); it may or may not ${acquire ? 'hold the key' : MAY_HAVE[p.kind]}`,
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

/** A reply cut off mid-line may still carry a grant's token (`A <token> <owner> <key…`): if it
 * names one of the `sent` acquires, the token is known and can be handed back. */
export function salvageGrant(
  partial: string,
  sent: readonly Pending[],
): { p: PendingAcquire; token: bigint; tokenText: string } | undefined {
  const grant = parsePartialGrant(partial);
  if (grant === undefined) return undefined;
  for (const p of sent) {
    if (p.kind === 'acquire' && p.owner === grant.owner && p.key.startsWith(grant.keyPrefix)) {
      return { p, token: BigInt(grant.token), tokenText: grant.token };
    }
  }
  return undefined;
}
