/** The fencing-token rule shared by the file lease and Ticketing, and the arithmetic of a token
 * reservation: a durable mark that no token issued so far exceeds (Ticketing's state file, and
 * cluster mode's mark in etcd). */

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

/** How far ahead a reservation reaches by default: this many ms worth of µs tokens. */
export const TOKEN_RESERVE_MS = 60_000;

/** Tokens are max(last + 1, wall-clock µs), so the next ones start at the greater of the two. */
function tokenBase(lastToken: bigint, wallMs: number): bigint {
  const wall = BigInt(Math.floor(wallMs * 1000));
  return wall > lastToken ? wall : lastToken;
}

/** The mark a reservation writes: `reserve` tokens above where the next tokens start. */
export function markAhead(upTo: bigint, wallMs: number, reserve: bigint): bigint {
  const mark = tokenBase(upTo, wallMs) + reserve;
  return mark > MAX_TOKEN ? MAX_TOKEN : mark;
}

/** Whether less than half of the reservation up to `durable` is left: time to top it up. */
export function reservationLow(durable: bigint, lastToken: bigint, wallMs: number, reserve: bigint): boolean {
  return durable - tokenBase(lastToken, wallMs) < reserve / 2n;
}
