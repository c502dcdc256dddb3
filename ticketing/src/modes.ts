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

/** The holder fields the fit rules read. */
export interface HolderLike {
  readonly shared: boolean;
  readonly slot: number;
}

/**
 * Does a request of kind `kind` (already equal to the key's) and sharing `shared` fit beside
 * `holders` now? A semaphore: fewer than N holders. A shared/exclusive lock: no holder, or only
 * shared holders (fewer than `maxShared`) and a shared request.
 */
export function fits(kind: number, shared: boolean, holders: readonly HolderLike[], maxShared: number): boolean {
  const n = holders.length;
  if (kind > 0) return n < kind;
  if (n === 0) return true;
  return shared && holders[0]!.shared && n < maxShared;
}

/** The lowest slot no holder has (a semaphore's holders have slots 0…N−1, so it is ≤ their count). */
export function lowestFreeSlot(holders: readonly HolderLike[]): number {
  const used = new Uint8Array(holders.length + 1);
  for (const holder of holders) if (holder.slot < used.length) used[holder.slot] = 1;
  return used.indexOf(0);
}
