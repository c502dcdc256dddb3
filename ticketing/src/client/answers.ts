/**
 * The client's reading of an answer reply beyond matching it: which request each kind answers,
 * a semaphore grant's slot, and `T`/`B`/`C` settling an acquire (docs/ticketing.md "Modes").
 */
import { ModeConflictError } from '../errors.js';
import type { PendingAcquire } from './pending.js';

/** The request each answer reply answers (for the error about one that matches nothing). */
export const UNMATCHED = {
  T: 'acquire',
  B: 'acquire',
  C: 'acquire',
  R: 'release',
  N: 'release',
  K: 'keep',
  G: 'keep',
} as const;

/** Does a grant's slot answer a request for `permits` (0: `x` or `s`, which get no slot)? */
export function slotAnswers(slot: number | undefined, permits: number): boolean {
  return slot === undefined ? permits === 0 : slot < permits;
}

/** Settles an acquire answered `T` (timed out), `B` (busy) or `C` (its mode does not fit the
 * key's kind: rejected with a ModeConflictError, nothing granted or queued). */
export function settleRefused(p: PendingAcquire, op: 'T' | 'B' | 'C'): void {
  if (op === 'C') {
    p.reject(new ModeConflictError(`${p.key}: the requested mode does not fit the key's current kind`, p.key, p.owner));
  } else {
    p.resolve({ status: op === 'B' ? 'busy' : 'timed-out', key: p.key, owner: p.owner });
  }
}
