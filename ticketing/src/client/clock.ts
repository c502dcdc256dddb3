import { performance } from 'node:perf_hooks';

/**
 * The client's clock: performance.now(), read at most once per turn of the event loop (and once
 * per received chunk). Request bookkeeping — connect timeouts, wait budgets, round trips — needs
 * milliseconds, not microseconds, and a clock read per request costs about 8 % of throughput.
 */
let turnNow: number | undefined;
const endTurn = (): void => {
  turnNow = undefined;
};
export function now(): number {
  if (turnNow === undefined) {
    turnNow = performance.now();
    process.nextTick(endTurn);
  }
  return turnNow;
}
/** A fresh reading, shared by the rest of this turn. */
export function freshNow(): number {
  if (turnNow === undefined) process.nextTick(endTurn);
  turnNow = performance.now();
  return turnNow;
}

/** The safety margin a holder takes off its lease (docs/ticketing-client.md "Keeping a lock"). */
export interface DeadlineMargin {
  /** Fraction of the lease: the two clocks may run at different rates. Default 0.01. */
  readonly fraction: number;
  /** Fixed part, ms: a timer fires late, and acting on it takes time. Default 50. */
  readonly ms: number;
}

export const DEFAULT_MARGIN: DeadlineMargin = { fraction: 0.01, ms: 50 };

/** No margin: the end of the lease itself (what `expiresAt` reports). */
const NO_MARGIN: DeadlineMargin = { fraction: 0, ms: 0 };

/**
 * The end of a lease on this clock, the one rule for a grant or a keep: counted from when the
 * request that granted or kept it was sent (the server applied it no earlier), never from when its
 * reply came, less the margin. Before it, the server cannot have let the lock go; a holder stops by
 * then (with the margin), and `expiresAt` reports it (without).
 */
export function leaseEnd(sentAt: number, leaseMs: number, margin: DeadlineMargin = NO_MARGIN): number {
  return sentAt + leaseMs - (leaseMs * margin.fraction + margin.ms);
}

/** A time on this clock as a wall-clock Date. */
export function wallClock(at: number, nowAt: number = now()): Date {
  return new Date(Date.now() + (at - nowAt));
}
