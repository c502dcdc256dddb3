/**
 * The records of the state machine (state.ts): a key's entry with its grants and its queue, and
 * the read-only views built from them. Only the state machine changes them: state.ts, the helpers
 * here, and its registries of keys and waiters (state-keys.ts, state-waiters.ts). A key's grants
 * are an intrusive list, as its queue is: a grant costs no array, and ends without a search.
 */
import type { HeapItem } from './deadline-heap.js';
import type { LockMode } from './modes.js';
import type { HeldKey, HolderView, KeyView, ObservedState, SessionId } from './state-types.js';

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
  /** Its published value (exclusive grants only). */
  value: string | undefined;
  /** The key's grants, oldest (lowest token) first. */
  older: Grant | undefined;
  newer: Grant | undefined;
}

export interface KeyEntry {
  readonly key: string;
  /** 0: a lock (modes x and s); N: a semaphore of N. Reset when the key has no holder nor waiter. */
  permits: number;
  /** Its grants (holders), oldest first, so in token order. */
  oldest: Grant | undefined;
  newest: Grant | undefined;
  grantCount: number;
  head: Waiter | undefined;
  tail: Waiter | undefined;
  waiting: number;
  /** Raised once per command that changes its holders or values (state.ts `#changed`). */
  rev: bigint;
  /** The `apply` that last raised `rev`. */
  revAt: number;
  /** Observed: its grants have deadlines, and it stays registered while vacant. */
  watched: boolean;
  /** Every registered key, in registration order: the sweep's path through the table. */
  olderKey: KeyEntry | undefined;
  newerKey: KeyEntry | undefined;
}

/** The key's grants, oldest first (for views and rare paths). */
export function grantsOf(entry: KeyEntry): Grant[] {
  const out: Grant[] = [];
  for (let grant = entry.oldest; grant !== undefined; grant = grant.newer) out.push(grant);
  return out;
}

/** Adds the grant as the key's newest. */
export function appendGrant(entry: KeyEntry, grant: Grant): void {
  grant.older = entry.newest;
  if (entry.newest === undefined) entry.oldest = grant;
  else entry.newest.newer = grant;
  entry.newest = grant;
  entry.grantCount++;
}

/** Takes the grant out of its key's list (and clears its links). */
export function removeGrant(grant: Grant): void {
  const { entry, older, newer } = grant;
  if (older === undefined) entry.oldest = newer;
  else older.newer = newer;
  if (newer === undefined) entry.newest = older;
  else newer.older = older;
  grant.older = grant.newer = undefined;
  entry.grantCount--;
}

export function keyView(entry: KeyEntry): KeyView {
  const waiters = [];
  for (let w = entry.head; w !== undefined; w = w.next)
    waiters.push({ id: w.id, session: w.session, owner: w.owner, mode: w.mode, deadline: w.at });
  const newest = entry.newest!;
  return {
    key: entry.key,
    ...kindView(entry),
    rev: entry.rev,
    owner: newest.owner,
    token: newest.token,
    grantedAt: newest.grantedAt,
    expiresAt: newest.expiresAt,
    holders: grantsOf(entry).map(holderView),
    waiters,
  };
}

/** The key in brief, or undefined when none of its grants is live at `now`. */
export function heldView(entry: KeyEntry, now: number): HeldKey | undefined {
  const holders = grantsOf(entry)
    .filter((grant) => now < grant.expiresAt)
    .map(holderView);
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
    rev: entry.rev,
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
  const { owner, token, shared, grantedAt, expiresAt, value } = grant;
  return { owner, token, shared, slot: grant.slot >= 0 ? grant.slot : undefined, grantedAt, expiresAt, value };
}

/** What an observer sees of the key (its live grants: a watched key's end at their expiry). */
export function observedState(entry: KeyEntry): ObservedState {
  const { oldest, grantCount } = entry;
  const only = grantCount === 1 && entry.permits === 0 && !oldest!.shared ? oldest! : undefined;
  const exclusive = only === undefined ? undefined : { token: only.token, owner: only.owner, value: only.value };
  return { rev: entry.rev, count: grantCount, exclusive };
}

/** Why a publish to `grant` (the key's under the publish's token, if any) changes nothing, or
 * undefined when it is the live exclusive grant it may change. */
export function publishRefusal(
  grant: Grant | undefined,
  registered: boolean,
  now: number,
): 'not-registered' | 'token-mismatch' | 'expired' | 'not-exclusive' | undefined {
  if (grant === undefined) return registered ? 'token-mismatch' : 'not-registered';
  // As for a keep: an expired grant's holder may already have stopped counting on it.
  if (now >= grant.expiresAt) return 'expired';
  return grant.shared || grant.entry.permits > 0 ? 'not-exclusive' : undefined;
}
