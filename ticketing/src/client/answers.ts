/**
 * The client's reading of an answer reply beyond matching it: which request each kind answers,
 * a semaphore grant's slot, `T`/`B`/`C` settling an acquire (docs/ticketing.md "Modes"), and the
 * request an `F` refuses (docs/ticketing-access.md).
 */
import { ForbiddenError, ModeConflictError } from '../errors.js';
import type { AnswerReply } from '../protocol.js';
import { isSentOn, type Pending, type PendingRegistry } from './pending.js';

/** The request each answer reply answers (for the error about one that matches nothing). */
export const UNMATCHED = {
  T: 'acquire',
  B: 'acquire',
  C: 'acquire',
  F: 'request',
  R: 'release',
  N: 'release',
  K: 'keep',
  G: 'keep',
} as const;

/** Does a grant's slot answer a request for `permits` (0: `x` or `s`, which get no slot)? */
export function slotAnswers(slot: number | undefined, permits: number): boolean {
  return slot === undefined ? permits === 0 : slot < permits;
}

/** The sent request on `lane` that a refusal answers: `T`, `B`, `C` an acquire (by owner); `F` an
 * acquire (by owner), else a release or a keep (by token). */
export function refusedRequest(
  registry: PendingRegistry,
  lane: object,
  answer: Extract<AnswerReply, { op: 'T' | 'B' | 'C' | 'F' }>,
): Pending | undefined {
  const sent = <P extends Pending>(p: P | undefined): P | undefined => (isSentOn(p, lane) ? p : undefined);
  if (answer.op !== 'F') return sent(registry.findAcquire(answer.owner, answer.key));
  const { id, key } = answer;
  return sent(registry.findAcquire(id, key)) ?? sent(registry.findRelease(id, key)) ?? sent(registry.findKeep(id, key));
}

/** Settles an acquire answered `T` (timed out), `B` (busy) or `C` (its mode does not fit the
 * key's kind: rejected with a ModeConflictError, nothing granted or queued), or any request
 * answered `F` (rejected with a ForbiddenError: nothing changed). */
export function settleRefused(p: Pending, op: 'T' | 'B' | 'C' | 'F'): void {
  if (op === 'F') {
    p.reject(new ForbiddenError(`${p.key}: the server's access rules do not let this client ${p.kind} it`, p.key));
  } else if (p.kind !== 'acquire') {
    throw new TypeError(`${op} answers an acquire, not a ${p.kind}`);
  } else if (op === 'C') {
    p.reject(new ModeConflictError(`${p.key}: the requested mode does not fit the key's current kind`, p.key, p.owner));
  } else {
    p.resolve({ status: op === 'B' ? 'busy' : 'timed-out', key: p.key, owner: p.owner });
  }
}
