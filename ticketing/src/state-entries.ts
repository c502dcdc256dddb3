/**
 * The records of the state machine (state.ts): a key's entry with its grants and its queue, and
 * the read-only views built from them. Only state.ts changes them.
 */
import type { HeapItem } from './deadline-heap.js';
import type { LockMode } from './modes.js';
import type { HeldKey, HolderView, KeyView, SessionId } from './state-types.js';

export interface Waiter extends HeapItem {
  readonly kind: 'wait';
  readonly id: number;
  readonly session: SessionId;
  readonly owner: string;
  readonly mode: LockMode;
  readonly shared: boolean;
  readonly entry: KeyEntry;
  readonly queuedAt: number;
  /** The key's queue. */
  prev: Waiter | undefined;
  next: Waiter | undefined;
  /** The session's waiters (for `disconnect`). */
  sessionPrev: Waiter | undefined;
  sessionNext: Waiter | undefined;
}

/** One grant; also its heap item, which ends it when its lease runs out (lazy expiry: only while
 * its key has waiters; eager expiry: always). */
export interface Grant extends HeapItem {
  readonly kind: 'expiry';
  readonly entry: KeyEntry;
  readonly owner: string;
  readonly token: bigint;
  readonly shared: boolean;
  /** A semaphore grant's slot; -1 otherwise. */
  readonly slot: number;
  readonly grantedAt: number;
  expiresAt: number;
}

export interface KeyEntry {
  readonly key: string;
  /** 0: a lock (modes x and s); N: a semaphore of N. Reset when the key has no holder nor waiter. */
  permits: number;
  /** Oldest first, so in token order. */
  readonly holders: Grant[];
  head: Waiter | undefined;
  tail: Waiter | undefined;
  waiting: number;
  /** Every registered key, in registration order: the sweep's path through the table. */
  olderKey: KeyEntry | undefined;
  newerKey: KeyEntry | undefined;
}

export function keyView(entry: KeyEntry): KeyView {
  const waiters = [];
  for (let w = entry.head; w !== undefined; w = w.next)
    waiters.push({ id: w.id, session: w.session, owner: w.owner, mode: w.mode, deadline: w.at });
  const newest = entry.holders[entry.holders.length - 1]!;
  return {
    key: entry.key,
    ...kindView(entry),
    owner: newest.owner,
    token: newest.token,
    grantedAt: newest.grantedAt,
    expiresAt: newest.expiresAt,
    holders: entry.holders.map(holderView),
    waiters,
  };
}

/** The key in brief, or undefined when none of its grants is live at `now`. */
export function heldView(entry: KeyEntry, now: number): HeldKey | undefined {
  const holders = entry.holders.filter((grant) => now < grant.expiresAt).map(holderView);
  if (holders.length === 0) return undefined;
  const waitersByMode: Record<string, number> = {};
  for (let w = entry.head; w !== undefined; w = w.next) {
    const mode = String(w.mode);
    waitersByMode[mode] = (waitersByMode[mode] ?? 0) + 1;
  }
  const { owner, token, expiresAt } = holders[holders.length - 1]!;
  return {
    key: entry.key,
    ...kindView(entry),
    owner,
    token,
    expiresAt,
    holders,
    waiters: entry.waiting,
    waitersByMode,
  };
}

function kindView(entry: KeyEntry): Pick<KeyView, 'kind' | 'permits'> {
  return entry.permits > 0 ? { kind: 'semaphore', permits: entry.permits } : { kind: 'lock', permits: undefined };
}

function holderView(grant: Grant): HolderView {
  const { owner, token, shared, grantedAt, expiresAt } = grant;
  return { owner, token, shared, slot: grant.slot >= 0 ? grant.slot : undefined, grantedAt, expiresAt };
}
