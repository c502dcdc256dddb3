/**
 * The acquire's decision: what a record, the kernel's liveness locks and the wait line say about
 * an acquire by `owner`, as one of a few states. Pure: the lookups that need the kernel or the
 * queue are asked through `AcquireFacts`, lazily, in the order the rule needs them (a probe that is
 * not needed is not made: its close would wake whoever watches that file).
 */
import type { LeaseState } from './operator/types.js';
import { isExpired, type LeaseRecord } from './record.js';

/**
 * What an acquire finds, in the order it looks (the Go original's switch, plus the hand-off): an
 * inspection's states (see LeaseState; a corrupt record is an error here), and
 * - `free`: no record;
 * - `handed-over`: a release handed it to this waiting acquire;
 * - `refresh`: this process holds the live generation for this owner.
 * `expired` is replaceable even if the old process is alive and still holds its .live; `held`:
 * unexpired, and its holder (here, or another live process) keeps it, or others wait in line;
 * `crashed`: unexpired, but nobody holds its .live.
 */
export type AcquireState = 'free' | 'handed-over' | 'refresh' | Exclude<LeaseState, 'corrupt'>;

/** The states a takeover starts from. */
export type TakeoverReason = Extract<AcquireState, 'free' | 'released' | 'expired' | 'crashed'>;

/** What the decision asks beyond the record: each asked at most once, only when the rule needs it. */
export interface AcquireFacts {
  /** Whether a release handed `record`'s generation to this waiting acquire (our flocked .wait file
   * renamed to its .live). */
  handedToUs(record: LeaseRecord): boolean;
  /** The token of the generation this process holds for the id, if any. */
  readonly heldToken: bigint | undefined;
  /** Whether a waiting acquire's first try finds others in line (it then queues behind them
   * whatever the holder's state: see WaitLine.othersInLine). */
  othersInLine(): boolean;
  /** Whether some process holds the generation's liveness lock. */
  holderAlive(token: bigint): boolean;
}

/** The state an acquire by `owner` finds at clock time `now`. */
export function acquireState(
  record: LeaseRecord | undefined,
  owner: string,
  now: number,
  facts: AcquireFacts,
): AcquireState {
  if (record === undefined) return 'free';
  if (record.owner === owner && facts.handedToUs(record)) return 'handed-over';
  if (record.owner === '') return 'released';
  if (isExpired(record, now)) return 'expired';
  // This process holds the live generation: only its own owner may refresh it.
  if (facts.heldToken === record.token) return record.owner === owner ? 'refresh' : 'held';
  // Unexpired and not ours (same owner without the local handle gets no favour). A waiting
  // acquire's first try with others in line queues behind them either way, so it does not ask:
  // the probe's close would wake the waiter watching that .live for nothing, under this lock.
  if (facts.othersInLine()) return 'held';
  return facts.holderAlive(record.token) ? 'held' : 'crashed';
}
