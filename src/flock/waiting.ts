/**
 * A waiting acquire's loop: try under the transition lock, and if refused, sleep until what the
 * refusal names is let go (the holder's `.live`, or the `.wait` of the waiter just ahead), its
 * `until` passes, this process changes the lease, the wait runs out, or the signal aborts. Every
 * grant, a hand-off's included, comes from a try (see handoff.ts), so the acquire's promise is
 * settled in one place.
 */
import { sleep } from '../port/abort.js';
import type { LeaseGrant } from '../port/types.js';
import { readClock } from '../port/validate.js';
import type { LeaseIO } from './io.js';
import { safeID } from './layout.js';
import type { Place } from './queue.js';
import type { Refused, WaitLine } from './waitline.js';
import { waitForUnlock } from './watch.js';

/** One try of a (possibly waiting) acquire: the grant, or why not and what to wait for. */
export type Attempt = { readonly grant: LeaseGrant } | Refused;

export interface WaitingOptions {
  readonly io: LeaseIO;
  readonly clock: () => number;
  readonly line: WaitLine;
}

export class WaitingAcquires {
  readonly #io: LeaseIO;
  readonly #clock: () => number;
  readonly #line: WaitLine;
  /** safeID → waiting acquires of this process, woken when this process changes that lease. */
  readonly #wakers = new Map<string, Set<() => void>>();

  constructor(options: WaitingOptions) {
    this.#io = options.io;
    this.#clock = options.clock;
    this.#line = options.line;
  }

  /**
   * Tries (`tryOnce`, under the transition lock, with the acquire's place in line and its
   * deadline) until a try grants the lease or `waitMs` runs out (then the last refusal is thrown).
   * The place's `.wait` file, if it still has one, is left as the wait ends.
   */
  async acquire(
    sessionId: string,
    owner: string,
    waitMs: number,
    signal: AbortSignal | undefined,
    tryOnce: (place: Place, deadline: number) => Promise<Attempt>,
  ): Promise<LeaseGrant> {
    const deadline = performance.now() + waitMs;
    const safe = safeID(sessionId);
    const place: Place = { owner };
    try {
      for (let idleRounds = 0, lastWatch: string | undefined; ;) {
        const attempt = await tryOnce(place, deadline);
        if ('grant' in attempt) return attempt.grant;
        // Rounds that end at once on the same watch saw no change: pause a little so we never spin.
        if (idleRounds > 2) await sleep(Math.min(2 ** idleRounds, 50), signal);
        const left = deadline - performance.now();
        if (left <= 0) throw attempt.refusal();
        const started = performance.now();
        await this.#waitForChange(safe, attempt, left, signal);
        idleRounds = performance.now() - started < 1 && attempt.watch === lastWatch ? idleRounds + 1 : 0;
        lastWatch = attempt.watch;
      }
    } finally {
      if (this.#wakers.get(safe)?.size === 0) this.#wakers.delete(safe);
      if (place.fd !== undefined) {
        this.#line.leave(safe, place);
        this.wake(safe); // whoever queued behind us may be first now
      }
    }
  }

  /** Wakes this process's waiting acquires on `safe` to look again. */
  wake(safe: string): void {
    const wakers = this.#wakers.get(safe);
    if (wakers !== undefined) for (const wake of wakers) wake();
  }

  /** Sleeps until what `attempt` names changes (see the module's doc), or `leftMs` pass. */
  #waitForChange(safe: string, attempt: Refused, leftMs: number, signal: AbortSignal | undefined): Promise<void> {
    let wakers = this.#wakers.get(safe);
    if (wakers === undefined) this.#wakers.set(safe, (wakers = new Set()));
    const untilMs = attempt.until === undefined ? Infinity : Math.max(0, attempt.until - readClock(this.#clock)) + 1;
    const ms = Math.min(leftMs, untilMs);
    return waitForUnlock(this.#io, attempt.watch, ms, signal, wakers, attempt.watchMode);
  }
}
