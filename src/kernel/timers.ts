/** Node fires a timer of more than 2^31-1 ms after 1 ms (with a warning): clamp every delay. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

export function timerDelay(ms: number): number {
  return Math.min(Math.max(ms, 0), MAX_TIMER_MS);
}
