/**
 * The lock table as a deterministic state machine: `apply(command, now)` → effects. No I/O, no
 * timers, no clock of its own: the same commands applied at the same instants to the same initial
 * state give the same effects and the same state. The network layer (server/) turns request
 * lines and its timers into commands and effects into reply lines. In cluster mode the leader
 * drives this same state machine and commits the keys each command changed to etcd before it
 * replies (cluster/commit-loop.ts); a new leader rebuilds it from etcd (`adopt`), and a grant's lease
 * restarts once its commit lets the reply leave (`restart-lease`). The commands, effects and views
 * are declared in state-types.ts.
 *
 * The rules are the tables of docs/ticketing.md ("Acquire", "Release", "Modes"). A key has a set
 * of grants (its holders, each with its own token and lease) and a FIFO queue; its kind (a lock
 * of modes x/s, or a semaphore of N, modes.ts) holds while it has either.
 * - acquire: a mode that does not fit the key's kind → conflict; a cap hit → busy, not queued;
 *   nothing queued and it fits the holders → grant; else wait 0 → timed out; else queue at the back.
 * - lazy takeover: an acquire first drops the key's expired holders. If that leaves no holder, it
 *   is granted at once when it fits, even ahead of waiters (the only non-FIFO path, as for a
 *   mutex), and then every waiter that fits; if holders remain, the waiters that now fit are
 *   granted first and the request follows the FIFO rule.
 * - release / expire of one grant (exact token): that grant ends, then every waiter that now fits
 *   is granted in queue order (a run of shared ones together, free semaphore slots in order),
 *   new tokens and expiries, no re-contention; a waiter that leaves the queue does the same for
 *   those behind it. Otherwise nothing changes.
 * - expiry: lazy (the next acquire drops it); a grant that expires while its key has waiters ends
 *   at its deadline (`expire`, driven by `nextDue`); expired grants of keys without waiters are
 *   removed by `sweep`.
 * - keep: a grant held under exactly that token and not expired → its expiry becomes now + the
 *   lease (never earlier than it was); anything else (released, expired even if not yet swept,
 *   taken over, never granted) → gone, and nothing changes. Waiters are not touched.
 * - cluster mode: adopt registers a grant made elsewhere, its lease counted from now; a lease
 *   restart gives the grant under that token a full lease from now + slack (never less than it
 *   had), and does nothing once the key carries another token.
 * The owner is an identifier only: a request whose owner equals the holder's gets nothing special.
 */
import { DeadlineHeap } from './deadline-heap.js';
import { checkNumber, MAX_TIMER_MS, nextToken } from '#kernel';
import { fits, isLockMode, kindOf, lowestFreeSlot, type LockMode } from './modes.js';
import type { Command, Effect, GrantPath, HeldKey, KeyView, ObservedState, SessionId } from './state-types.js';
import { isValue } from './election-wire.js';
import {
  appendGrant,
  grantsOf,
  heldView,
  keyView,
  observedState,
  publishRefusal,
  removeGrant,
  type Grant,
  type KeyEntry,
  type Waiter,
} from './state-entries.js';
import { checkAdopt, checkStateOptions, type TicketStateOptions } from './state-options.js';
import { KeyRegistry } from './state-keys.js';
import { WaiterRegistry } from './state-waiters.js';

export { DEFAULT_LIMITS, type TicketStateOptions } from './state-options.js';

type Effects = Effect[];

export class TicketState {
  readonly leaseMs: number;
  readonly maxKeys: number;
  readonly maxWaiters: number;
  readonly maxWaitersPerKey: number;
  readonly maxSharedHolders: number;
  readonly maxPermits: number;

  // Tables, not Maps, and intrusive lists whose links are cleared on removal: see table.ts.
  readonly #keys = new KeyRegistry();
  readonly #waiters = new WaiterRegistry();
  readonly #deadlines = new DeadlineHeap<Waiter | Grant>();
  #lastToken: bigint;
  #seq = 0;
  /** The next key a sweep in progress will visit (undefined: start from the oldest). */
  #sweepCursor: KeyEntry | undefined;
  #sweeping = false;
  readonly #eager: boolean;
  /** Observed keys (`watch`), registered or not. */
  readonly #watched = new Set<string>();
  /** Counts `apply` calls: a key's rev rises once per command. */
  #applied = 0;
  /** Observed keys the command being applied changed. */
  #changes: KeyEntry[] = [];

  constructor(options: TicketStateOptions) {
    const checked = checkStateOptions(options);
    this.leaseMs = checked.leaseMs;
    this.maxKeys = checked.maxKeys;
    this.maxWaiters = checked.maxWaiters;
    this.maxWaitersPerKey = checked.maxWaitersPerKey;
    this.maxSharedHolders = checked.maxSharedHolders;
    this.maxPermits = checked.maxPermits;
    this.#lastToken = checked.lastToken;
    this.#eager = checked.eager;
  }

  /** The greatest token issued so far (or the starting floor). */
  get lastToken(): bigint {
    return this.#lastToken;
  }
  /** Registered keys (including expired ones not yet swept or taken over). */
  get keyCount(): number {
    return this.#keys.size;
  }
  /** Queued requests, all keys together. */
  get waiterCount(): number {
    return this.#waiters.size;
  }

  /** Does the session have requests queued? (The server's idle timeout spares a session that does.) */
  hasWaiters(session: SessionId): boolean {
    return this.#waiters.has(session);
  }

  /** The key, or undefined when it has no grant and no waiter. */
  get(key: string): KeyView | undefined {
    const entry = this.#keys.get(key);
    return entry === undefined || (entry.grantCount === 0 && entry.waiting === 0) ? undefined : keyView(entry);
  }

  /** What an observer sees of the key now. One not registered is vacant at the last token, which
   * is at least every rev it ever had and less than every rev it will have. */
  observed(key: string): ObservedState {
    const entry = this.#keys.get(key);
    return entry === undefined ? { rev: this.#lastToken, count: 0, exclusive: undefined } : observedState(entry);
  }

  /** Keys with a grant whose lease has not run out at `now`, named with `prefix`, that `accept`
   * takes (if given), at most `limit`, oldest first. Walks the table: for an operator's view. */
  held(now: number, prefix: string, limit: number, accept?: (key: string) => boolean): HeldKey[] {
    const out: HeldKey[] = [];
    for (let entry = this.#keys.oldest; entry !== undefined && out.length < limit; entry = entry.newerKey) {
      const view = entry.key.startsWith(prefix) && accept?.(entry.key) !== false ? heldView(entry, now) : undefined;
      if (view !== undefined) out.push(view);
    }
    return out;
  }

  /** One key as `held` lists it, or undefined when none of its grants is live at `now`. */
  heldKey(key: string, now: number): HeldKey | undefined {
    const entry = this.#keys.get(key);
    return entry === undefined ? undefined : heldView(entry, now);
  }

  /** The earliest instant at which `nextDue` will have work (a wait running out, or a grant of a
   * key with waiters expiring), or `undefined` when nothing is scheduled. */
  nextDeadline(): number | undefined {
    return this.#deadlines.peek()?.at;
  }

  /**
   * The command that is due at `now`, earliest first, or `undefined`. Applying it removes or
   * moves its deadline, so `while ((c = nextDue(now))) apply(c, now)` terminates.
   */
  nextDue(now: number): Command | undefined {
    const item = this.#deadlines.peek();
    if (item === undefined || item.at > now) return undefined;
    if (item.kind === 'wait') return { type: 'wait-timeout', key: item.entry.key, waiter: item.id };
    return { type: 'expire', key: item.entry.key, token: item.token };
  }

  apply(command: Command, now: number): Effect[] {
    if (!(now >= 0 && now < 8.64e15)) throw new RangeError(`now must be epoch milliseconds, got ${now}`);
    this.#applied++;
    const effects = this.#dispatch(command, now);
    return this.#changes.length === 0 ? effects : this.#appendChanges(effects);
  }

  /** One `changed` effect per observed key the command changed, after its other effects. */
  #appendChanges(effects: Effects): Effects {
    for (const entry of this.#changes) effects.push({ type: 'changed', key: entry.key, state: observedState(entry) });
    this.#changes = [];
    return effects;
  }

  #dispatch(command: Command, now: number): Effects {
    switch (command.type) {
      case 'acquire':
        return this.#acquire(command.session, command.key, command.owner, command.waitMs, command.mode ?? 'x', now);
      case 'release':
        return this.#release(command.session, command.key, command.token, now);
      case 'keep':
        return this.#keep(command.session, command.key, command.token, now);
      case 'expire':
        return this.#expire(command.key, command.token, now);
      case 'wait-timeout':
        return this.#waitTimeout(command.key, command.waiter, now);
      case 'disconnect':
        return this.#disconnect(command.session, command.notify === true, now);
      case 'sweep':
        return this.#sweep(command.limit ?? Infinity, now);
      case 'adopt':
        return this.#adopt(command, now);
      case 'publish':
        return this.#publish(command.session, command.key, command.token, command.value, now);
      case 'watch':
      case 'unwatch':
        return this.#watch(command.key, command.type === 'watch');
      case 'restart-lease':
        return this.#restartLease(command.key, command.token, now + checkSlack(command.slackMs ?? 0));
      default:
        throw new TypeError(`unknown command ${JSON.stringify((command as { type?: unknown }).type)}`);
    }
  }

  #acquire(session: SessionId, key: string, owner: string, waitMs: number, mode: LockMode, now: number): Effects {
    if (!isLockMode(mode)) throw new RangeError(`mode must be 'x', 's' or 1..65535, got ${String(mode)}`);
    const kind = kindOf(mode);
    if (kind > this.maxPermits) return [{ type: 'busy', session, key, owner, limit: 'permits' }];
    let entry = this.#keys.get(key);
    // Lazy expiry: drop the expired grants before deciding (see the header).
    const effects = entry !== undefined && hasExpired(entry, now) ? this.#dropExpiredFirst(entry, now) : undefined;
    if (entry === undefined) {
      if (this.#keys.size >= this.maxKeys) return [{ type: 'busy', session, key, owner, limit: 'keys' }];
      entry = this.#register(key, kind);
    }
    const refusal = this.#refusal(entry, kind, mode === 's');
    if (refusal !== undefined) return this.#answer(effects, refusalEffect(refusal, session, key, owner), entry, now);
    const takeover = effects !== undefined && entry.grantCount === 0;
    if ((entry.waiting === 0 || takeover) && fits(kind, mode === 's', entry, this.maxSharedHolders))
      return this.#grantNow(entry, session, owner, mode, takeover ? 'takeover' : 'free', now, effects);
    return this.#queue(entry, session, owner, waitMs, mode, now, effects);
  }

  /** Lazy expiry: the key's expired grants end; if some grants remain, the waiters that now fit
   * are granted (if none remains, the request decides first: the takeover). */
  #dropExpiredFirst(entry: KeyEntry, now: number): Effects {
    const effects: Effects = [];
    this.#dropExpired(entry, now, effects);
    if (entry.grantCount > 0) this.#grantWaiters(entry, now, 'expiry', effects);
    return effects;
  }

  /** Why a request of this kind cannot be granted nor queued on the key now, if it cannot. A key
   * with neither holders nor waiters takes the request's kind. */
  #refusal(entry: KeyEntry, kind: number, shared: boolean): 'conflict' | 'shared-holders' | undefined {
    const { grantCount } = entry;
    if (grantCount === 0 && entry.waiting === 0) entry.permits = kind;
    else if (entry.permits !== kind) return 'conflict';
    return shared && grantCount >= this.maxSharedHolders && entry.oldest!.shared ? 'shared-holders' : undefined;
  }

  #grantNow(
    entry: KeyEntry,
    session: SessionId,
    owner: string,
    mode: LockMode,
    path: 'free' | 'takeover',
    now: number,
    effects: Effects | undefined,
  ): Effects {
    const grant = this.#addHolder(entry, owner, mode === 's', now);
    if (grant === undefined)
      return this.#answer(effects, { type: 'busy', session, key: entry.key, owner, limit: 'tokens' }, entry, now);
    const granted = grantedEffect(grant, session, mode, path, now);
    if (effects === undefined) return [granted];
    effects.push(granted);
    if (path === 'takeover') this.#grantWaiters(entry, now, 'expiry', effects);
    return effects;
  }

  #queue(
    entry: KeyEntry,
    session: SessionId,
    owner: string,
    waitMs: number,
    mode: LockMode,
    now: number,
    effects: Effects | undefined,
  ): Effects {
    const { key } = entry;
    if (waitMs === 0)
      return this.#answer(effects, { type: 'timed-out', session, key, owner, reason: 'held' }, entry, now);
    const limit =
      entry.waiting >= this.maxWaitersPerKey
        ? 'waiters-per-key'
        : this.#waiters.size >= this.maxWaiters
          ? 'waiters'
          : undefined;
    if (limit !== undefined) return this.#answer(effects, { type: 'busy', session, key, owner, limit }, entry, now);
    const waiter = this.#waiters.enqueue(entry, this.#seq++, session, owner, mode, now + waitMs, now);
    if (entry.waiting === 1 && !this.#eager && !entry.watched) {
      for (let grant = entry.oldest; grant !== undefined; grant = grant.newer)
        this.#deadlines.update(grant, grant.expiresAt);
    }
    this.#deadlines.push(waiter);
    const { id, at: deadline } = waiter;
    return this.#answer(
      effects,
      { type: 'queued', session, key, owner, waiter: id, deadline, position: entry.waiting },
      entry,
      now,
    );
  }

  /** Appends the request's one answer to what the lazy takeover did. A takeover that was not
   * granted left the key with no holder: its waiters get it (or the key goes). */
  #answer(effects: Effects | undefined, answer: Effect, entry: KeyEntry, now: number): Effects {
    if (effects === undefined) effects = [answer];
    else effects.push(answer);
    if (entry.grantCount === 0) this.#grantWaiters(entry, now, 'expiry', effects);
    return effects;
  }

  #adopt(command: Extract<Command, { type: 'adopt' }>, now: number): Effects {
    checkAdopt(command);
    const { key, owner, token, slot, rev = 0n, value } = command;
    const mode = command.mode ?? 'x';
    const kind = kindOf(mode);
    const entry = this.#keys.get(key);
    const holders = entry === undefined ? [] : grantsOf(entry);
    if (
      (entry !== undefined && entry.permits !== kind) ||
      holders.some((grant) => grant.token === token || grant.slot === slot) ||
      (kind === 0 && holders.length > 0 && (mode === 'x' || !holders[0]!.shared)) ||
      (kind > 0 && !(Number.isInteger(slot) && slot! >= 0 && slot! < kind))
    ) {
      throw new Error(`key ${key} is already registered: a grant that does not fit it cannot be adopted`);
    }
    if (token > this.#lastToken) this.#lastToken = token;
    const grant = this.#hold(entry ?? this.#register(key, kind), owner, token, mode === 's', now, slot);
    grant.value = value;
    // The stored rev stands (0: stored before election), though below the last token (a new
    // leader's reservation): observers saw it, and no change since raised it.
    if (rev !== 0n) this.#raiseRev(grant.entry, rev);
    return [{ type: 'adopted', key, owner, token, expiresAt: grant.expiresAt }];
  }

  #publish(session: SessionId, key: string, token: bigint, value: string, now: number): Effects {
    if (!isValue(value)) throw new RangeError('value must be 1-512 bytes of printable ASCII');
    const grant = this.#find(key, token);
    const reason = publishRefusal(grant, this.#keys.get(key) !== undefined, now);
    if (reason !== undefined) return [{ type: 'gone', session, key, token, reason }];
    grant!.value = value;
    this.#changed(grant!.entry);
    return [{ type: 'published', session, key, token, value }];
  }

  #watch(key: string, on: boolean): Effects {
    if (on) this.#watched.add(key);
    else this.#watched.delete(key);
    const entry = this.#keys.get(key);
    if (entry === undefined || entry.watched === on) return [];
    entry.watched = on;
    if (!this.#eager && entry.waiting === 0) {
      for (let grant = entry.oldest; grant !== undefined; grant = grant.newer) {
        if (on) this.#deadlines.update(grant, grant.expiresAt);
        else this.#deadlines.remove(grant);
      }
    }
    if (!on && entry.grantCount === 0 && entry.waiting === 0) this.#deleteKey(entry);
    return [];
  }

  /** The key's holders or a value changed: its rev rises, once per command. A key's first rev is
   * the last token (its first grant's), so it exceeds every rev the key had before it was last
   * forgotten; the last token never falls below a rev, so the next key's first rev exceeds it too. */
  #changed(entry: KeyEntry): void {
    if (entry.revAt === this.#applied) return;
    entry.revAt = this.#applied;
    this.#raiseRev(entry, entry.rev === 0n ? this.#lastToken : entry.rev + 1n);
    if (entry.watched) this.#changes.push(entry);
  }

  #raiseRev(entry: KeyEntry, rev: bigint): void {
    entry.rev = rev;
    if (rev > this.#lastToken) this.#lastToken = rev;
  }

  #restartLease(key: string, token: bigint, from: number): Effects {
    const grant = this.#find(key, token);
    if (grant === undefined) return [];
    this.#extend(grant, from);
    const { owner, expiresAt } = grant;
    return [{ type: 'lease-restarted', key, owner, token, expiresAt }];
  }

  /** The key's grant under exactly `token`. */
  #find(key: string, token: bigint): Grant | undefined {
    return grantOf(this.#keys.get(key), token);
  }

  /** The grant's lease counts again from `from`: its expiry moves there plus a lease, never earlier. */
  #extend(grant: Grant, from: number): void {
    grant.expiresAt = Math.max(grant.expiresAt, from + this.leaseMs);
    if (grant.entry.waiting > 0 || this.#eager || grant.entry.watched) this.#deadlines.update(grant, grant.expiresAt);
  }

  #register(key: string, permits: number): KeyEntry {
    // The size first: `has` would hash every new key's name (a fresh string) for nothing.
    return this.#keys.register(key, permits, this.#watched.size > 0 && this.#watched.has(key));
  }

  #release(session: SessionId, key: string, token: bigint, now: number): Effects {
    const entry = this.#keys.get(key);
    if (entry === undefined) return [{ type: 'not-released', session, key, token, reason: 'not-registered' }];
    const grant = grantOf(entry, token);
    if (grant === undefined) return [{ type: 'not-released', session, key, token, reason: 'token-mismatch' }];
    // Even an expired, not yet swept grant is released by its exact token (docs: "R, not N").
    const effects: Effects = [{ type: 'released', session, key, token }];
    this.#end(grant, now, 'handoff', effects);
    return effects;
  }

  #keep(session: SessionId, key: string, token: bigint, now: number): Effects {
    const entry = this.#keys.get(key);
    if (entry === undefined) return [{ type: 'gone', session, key, token, reason: 'not-registered' }];
    const grant = grantOf(entry, token);
    if (grant === undefined) return [{ type: 'gone', session, key, token, reason: 'token-mismatch' }];
    // Unlike a release, an expired grant that is not yet swept or taken over is not kept: its lease
    // ran out, and its holder may already have stopped counting on it.
    if (now >= grant.expiresAt) return [{ type: 'gone', session, key, token, reason: 'expired' }];
    this.#extend(grant, now); // never earlier than it was
    const { owner, expiresAt } = grant;
    return [{ type: 'kept', session, key, owner, token, expiresAt, leaseMs: Math.floor(this.leaseMs) }];
  }

  #expire(key: string, token: bigint, now: number): Effects {
    const grant = this.#find(key, token);
    if (grant === undefined || now < grant.expiresAt) return [];
    const effects: Effects = [{ type: 'expired', key, owner: grant.owner, token }];
    this.#end(grant, now, 'expiry', effects);
    return effects;
  }

  #waitTimeout(key: string, id: number, now: number): Effects {
    const waiter = this.#waiters.get(id);
    if (waiter === undefined || waiter.entry.key !== key || now < waiter.at) return [];
    const { entry } = waiter;
    this.#unqueue(waiter);
    const effects: Effects = [
      { type: 'timed-out', session: waiter.session, key, owner: waiter.owner, reason: 'waited' },
    ];
    this.#grantWaiters(entry, now, 'unblocked', effects);
    return effects;
  }

  #disconnect(session: SessionId, notify: boolean, now: number): Effects {
    const effects: Effects = [];
    // Oldest first, so the effects come in queueing order.
    const all = this.#waiters.ofSession(session);
    for (const waiter of all) {
      this.#unqueue(waiter);
      const { key } = waiter.entry;
      effects.push(
        notify
          ? { type: 'timed-out', session, key, owner: waiter.owner, reason: 'cancelled' }
          : { type: 'abandoned', session, key, owner: waiter.owner, waiter: waiter.id },
      );
    }
    // Those queued behind them may fit now.
    for (const waiter of all)
      if (this.#keys.get(waiter.entry.key) === waiter.entry)
        this.#grantWaiters(waiter.entry, now, 'unblocked', effects);
    return effects;
  }

  #sweep(limit: number, now: number): Effects {
    const effects: Effects = [];
    let entry = this.#sweeping ? this.#sweepCursor : this.#keys.oldest;
    this.#sweeping = true;
    let visited = 0;
    let removed = 0;
    while (entry !== undefined && visited < limit) {
      visited++;
      const next = entry.newerKey;
      // Keys with waiters have their grants ended by `expire` at their deadlines, never swept.
      if (entry.waiting === 0 && hasExpired(entry, now)) {
        this.#dropExpired(entry, now, effects);
        if (entry.grantCount === 0 && !entry.watched) {
          removed++;
          this.#deleteKey(entry);
        }
      }
      entry = next;
    }
    const done = entry === undefined;
    this.#sweeping = !done;
    this.#sweepCursor = entry;
    effects.push({ type: 'swept', visited, removed, done });
    return effects;
  }

  #deleteKey(entry: KeyEntry): void {
    // A sweep in progress resumes at the next key instead.
    if (this.#sweepCursor === entry) this.#sweepCursor = entry.newerKey;
    this.#keys.delete(entry);
  }

  /** Removes the key's grants whose lease ran out (`expired` for each); the entry stays. */
  #dropExpired(entry: KeyEntry, now: number, effects: Effects): void {
    for (let grant = entry.oldest; grant !== undefined;) {
      const next = grant.newer;
      if (now >= grant.expiresAt) {
        removeGrant(grant);
        this.#deadlines.remove(grant);
        effects.push({ type: 'expired', key: entry.key, owner: grant.owner, token: grant.token });
        this.#changed(entry);
      }
      grant = next;
    }
  }

  /** Ends one grant (released or expired), then grants every waiter that now fits. */
  #end(grant: Grant, now: number, path: 'handoff' | 'expiry', effects: Effects): void {
    const { entry } = grant;
    removeGrant(grant);
    this.#deadlines.remove(grant);
    this.#changed(entry);
    this.#grantWaiters(entry, now, path, effects);
  }

  /** Grants the waiters at the front of the queue while they fit, in order (those whose wait ran
   * out leave it timed out); deletes the key when it is left with neither holders nor waiters. */
  #grantWaiters(entry: KeyEntry, now: number, path: GrantPath, effects: Effects): void {
    for (let waiter = entry.head; waiter !== undefined; waiter = entry.head) {
      const { session, owner } = waiter;
      if (waiter.at <= now) {
        this.#unqueue(waiter);
        effects.push({ type: 'timed-out', session, key: entry.key, owner, reason: 'waited' });
        continue;
      }
      if (!fits(entry.permits, waiter.shared, entry, this.maxSharedHolders)) break;
      this.#unqueue(waiter);
      const grant = this.#addHolder(entry, owner, waiter.shared, now);
      if (grant === undefined) {
        effects.push({ type: 'busy', session, key: entry.key, owner, limit: 'tokens' });
        continue;
      }
      effects.push(grantedEffect(grant, session, waiter.mode, path, waiter.queuedAt));
    }
    if (entry.grantCount === 0 && entry.waiting === 0 && !entry.watched) this.#deleteKey(entry);
  }

  /** A new grant with a new token (undefined when tokens ran out), in the key's lowest free slot. */
  #addHolder(entry: KeyEntry, owner: string, shared: boolean, now: number): Grant | undefined {
    const token = this.#issue(now);
    return token === undefined ? undefined : this.#hold(entry, owner, token, shared, now);
  }

  #hold(entry: KeyEntry, owner: string, token: bigint, shared: boolean, now: number, slotAt?: number): Grant {
    const slot = entry.permits > 0 ? (slotAt ?? lowestFreeSlot(entry)) : -1;
    const expiresAt = now + this.leaseMs;
    const grant: Grant = {
      kind: 'expiry',
      entry,
      owner,
      token,
      shared,
      slot,
      grantedAt: now,
      expiresAt,
      at: 0,
      seq: this.#seq++,
      heapIndex: -1,
      value: undefined,
      older: undefined,
      newer: undefined,
    };
    appendGrant(entry, grant);
    this.#changed(entry);
    if (entry.waiting > 0 || this.#eager || entry.watched) this.#deadlines.update(grant, expiresAt);
    return grant;
  }

  #unqueue(waiter: Waiter): void {
    const { entry } = waiter;
    this.#waiters.unqueue(waiter);
    if (entry.waiting === 0 && !this.#eager && !entry.watched)
      for (let grant = entry.oldest; grant !== undefined; grant = grant.newer) this.#deadlines.remove(grant);
    this.#deadlines.remove(waiter);
  }

  /** The kernel's token rule, max(last + 1, wall-clock µs), shared with the file lease: strictly
   * increasing across the whole server, so every grant on a key, whatever its mode, has a greater
   * token than every earlier one. `undefined` at 2^64-1. */
  #issue(now: number): bigint | undefined {
    const token = nextToken(this.#lastToken, now);
    if (token !== undefined) this.#lastToken = token;
    return token;
  }
}

/** The entry's grant under exactly `token`. */
function grantOf(entry: KeyEntry | undefined, token: bigint): Grant | undefined {
  if (entry === undefined) return undefined;
  for (let grant = entry.oldest; grant !== undefined; grant = grant.newer) if (grant.token === token) return grant;
  return undefined;
}

function grantedEffect(grant: Grant, session: SessionId, mode: LockMode, path: GrantPath, requestedAt: number): Effect {
  const { entry, owner, token, expiresAt } = grant;
  const slot = entry.permits > 0 ? grant.slot : undefined;
  return { type: 'granted', session, key: entry.key, owner, token, expiresAt, path, mode, slot, requestedAt };
}

function refusalEffect(refusal: 'conflict' | 'shared-holders', session: SessionId, key: string, owner: string): Effect {
  return refusal === 'conflict'
    ? { type: 'conflict', session, key, owner }
    : { type: 'busy', session, key, owner, limit: refusal };
}

/** Has any grant of the key run out? */
function hasExpired(entry: KeyEntry, now: number): boolean {
  for (let grant = entry.oldest; grant !== undefined; grant = grant.newer) if (now >= grant.expiresAt) return true;
  return false;
}

/** A lease restart's slack: at most a timer's longest delay, so the expiry stays epoch ms. */
const checkSlack = (value: unknown): number => checkNumber(value, 'slackMs', { zero: true, max: MAX_TIMER_MS });
