/** The reconnect delay after `failures` consecutive failures: exponential with jitter, and at
 * least `floorMs` (doubling while it repeats) after a server error that asks for a pause. */
export function backoffDelay(
  failures: number,
  backoff: { readonly initialMs: number; readonly maxMs: number },
  floorMs: number | undefined,
): number {
  const { initialMs, maxMs } = backoff;
  const exponent = Math.min(failures - 1, 30);
  const base = Math.min(maxMs, initialMs * 2 ** exponent);
  const jittered = base * (0.5 + Math.random() * 0.5);
  const floor = floorMs === undefined ? 0 : Math.min(Math.max(maxMs, floorMs), floorMs * 2 ** Math.min(exponent, 6));
  return Math.max(jittered, floor);
}
