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
