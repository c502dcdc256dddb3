/** The fencing-token rule shared by the file lease and Ticketing. */

/** Tokens are uint64, as in the Go original's record and on Ticketing's wire. */
export const MAX_TOKEN = (1n << 64n) - 1n;

/**
 * The next token: max(previous + 1, wall-clock microseconds). Monotone, and still greater than
 * everything issued before when the last token is lost, pruned or repaired (as long as the wall
 * clock is not stepped back). `undefined` when `previous` is already 2^64-1.
 */
export function nextToken(previous: bigint, nowMs: number): bigint | undefined {
  if (previous >= MAX_TOKEN) return undefined;
  const wallMicros = BigInt(Math.floor(nowMs * 1000));
  const successor = previous + 1n;
  return wallMicros > successor ? wallMicros : successor;
}
