/** setTimeout's longest delay: Node fires a longer one (Infinity included) after 1 ms. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** A delay setTimeout keeps: at most ~24.8 days (callers re-check their deadline when it fires). */
export function timerDelay(ms: number): number {
  return Math.min(Math.max(ms, 0), MAX_TIMER_MS);
}

/** The first pause before a renewal, keep or release that got no answer is tried again (each next
 * pause doubles, within what is left of the lease): both packages' holders back off alike. */
export const RETRY_FIRST_MS = 25;
