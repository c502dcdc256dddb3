/**
 * The lock modes of an `A` request (docs/ticketing.md "Modes") and the rules that say whether a
 * request fits a key: which kind of key it asks for, whether it fits the key's holders now, and
 * which semaphore slot it gets. Pure functions over the holder set; state.ts applies them.
 */

/** `'x'` exclusive, `'s'` shared, or a number N: one of N permits (a semaphore of N). */
export type LockMode = 'x' | 's' | number;

/** The greatest N a request can carry on the wire. */
export const MAX_PERMITS = 65535;

export const DEFAULT_MODE_LIMITS = {
  /** Shared holders of one key at once. */
  maxSharedHolders: 10_000,
  /** The greatest N a semaphore request may ask for. */
  maxPermits: MAX_PERMITS,
} as const;

/** A key's kind, as a number: 0 for a shared/exclusive lock (modes `x` and `s`), N for a
 * semaphore of N. A request fits a key's kind only if its own kind is the same. */
export function kindOf(mode: LockMode): number {
  return typeof mode === 'number' ? mode : 0;
}

/** Is `mode` a valid mode value (for commands built in code rather than parsed)? */
export function isLockMode(mode: unknown): mode is LockMode {
  return (
    mode === 'x' || mode === 's' || (Number.isInteger(mode) && (mode as number) >= 1 && (mode as number) <= MAX_PERMITS)
  );
}

/** The holder fields the fit rules read: a key's holders are a list, oldest first. */
interface HolderLike {
  readonly shared: boolean;
  readonly slot: number;
  readonly newer: HolderLike | undefined;
}

/** A key's holders as the fit rules read them. */
export interface HolderSet {
  readonly grantCount: number;
  readonly oldest: HolderLike | undefined;
}

/**
 * Does a request of kind `kind` (already equal to the key's) and sharing `shared` fit beside the
 * key's holders now? A semaphore: fewer than N holders. A shared/exclusive lock: no holder, or
 * only shared holders (fewer than `maxShared`) and a shared request.
 */
export function fits(kind: number, shared: boolean, holders: HolderSet, maxShared: number): boolean {
  const n = holders.grantCount;
  if (kind > 0) return n < kind;
  if (n === 0) return true;
  return shared && holders.oldest!.shared && n < maxShared;
}

/** The lowest slot no holder has (a semaphore's holders have slots 0…N−1, so it is ≤ their count). */
export function lowestFreeSlot(holders: HolderSet): number {
  const used = new Uint8Array(holders.grantCount + 1);
  for (let h = holders.oldest; h !== undefined; h = h.newer) if (h.slot < used.length) used[h.slot] = 1;
  return used.indexOf(0);
}
