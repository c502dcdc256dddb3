/**
 * The lock table as a deterministic state machine: `apply(command, now)` → effects. No I/O, no
 * timers, no clock of its own: the same commands applied at the same instants to the same initial
 * state give the same effects and the same state. The network layer (server/) turns request
 * lines and its timers into commands and effects into reply lines. In cluster mode the leader
 * drives this same state machine and commits the keys each command changed to etcd before it
 * replies (cluster/node.ts); a new leader rebuilds it from etcd (`adopt`), and a grant's lease
 * restarts once its commit lets the reply leave (`restart-lease`). The commands, effects and views
 * are declared in state-types.ts.
 *
 * The rules are the two tables of docs/ticketing.md ("Acquire", "Release"):
 * - acquire: free → grant; expired → take over at once (the only non-FIFO path); held and wait 0
 *   → timed out; held and wait > 0 → queue at the back; a cap hit → busy, not queued.
 * - release: matching token → released, and the front waiter gets the key directly (new token,
 *   new expiry, no re-contention); otherwise not released and nothing changes.
 * - expiry: lazy (the next acquire takes over); a key that expires WITH waiters is handed to the
 *   front waiter at its deadline (`expire`, driven by `nextDue`); expired keys without waiters
 *   are removed by `sweep`.
 * - keep: the key held under exactly that token and not expired → its expiry becomes now + the
 *   lease (never earlier than it was); anything else (released, expired even if not yet swept,
 *   taken over, never granted) → gone, and nothing changes. Waiters are not touched.
 * - cluster mode: adopt registers a grant made elsewhere, its lease counted from now; a lease
 *   restart gives the grant under that token a full lease from now + slack (never less than it
 *   had), and does nothing once the key carries another token.
 * The owner is an identifier only: a request whose owner equals the holder's gets nothing special.
 */
import { DeadlineHeap, type HeapItem } from './deadline-heap.js';
import { checkNumber, MAX_TIMER_MS, MAX_TOKEN, nextToken } from '#kernel';
import type { Command, Effect, HeldKey, KeyView, SessionId } from './state-types.js';
import { Table } from './table.js';

export interface TicketStateOptions {
  /** Lease length of every grant, ms. */
  readonly leaseMs: number;
  readonly maxKeys?: number;
  readonly maxWaiters?: number;
  readonly maxWaitersPerKey?: number;
  /** Every token issued will be greater than this (a restart's high-water mark). */
  readonly lastToken?: bigint;
  /** `lazy` (single mode): an expired key is taken over by the next acquire or swept; only a key
   * with waiters has a deadline. `eager` (cluster mode): every grant has a deadline, so `nextDue`
   * yields `expire` for every key whose lease ran out and nothing waits for a sweep. */
  readonly expiry?: 'lazy' | 'eager';
}

export const DEFAULT_LIMITS = {
  maxKeys: 1_000_000,
  maxWaiters: 100_000,
  maxWaitersPerKey: 10_000,
} as const;

interface Waiter extends HeapItem {
  readonly kind: 'wait';
  readonly id: number;
  readonly session: SessionId;
  readonly owner: string;
  readonly entry: KeyEntry;
  readonly queuedAt: number;
  /** The key's queue. */
  prev: Waiter | undefined;
  next: Waiter | undefined;
  /** The session's waiters (for `disconnect`). */
  sessionPrev: Waiter | undefined;
  sessionNext: Waiter | undefined;
}

/** The heap item that hands a key to its front waiter when the lease runs out (lazy expiry: only
 * while the key has waiters, an expired key without waiters is taken over lazily or swept; eager
 * expiry: always). */
interface ExpiryItem extends HeapItem {
  readonly kind: 'expiry';
  readonly entry: KeyEntry;
}

interface KeyEntry {
  readonly key: string;
  owner: string;
  token: bigint;
  grantedAt: number;
  expiresAt: number;
  head: Waiter | undefined;
  tail: Waiter | undefined;
  waiting: number;
  readonly expiry: ExpiryItem;
  /** Every registered key, in registration order: the sweep's path through the table. */
  olderKey: KeyEntry | undefined;
  newerKey: KeyEntry | undefined;
}

interface SessionWaiters {
  head: Waiter | undefined;
}

type Effects = Effect[];

export class TicketState {
  readonly leaseMs: number;
  readonly maxKeys: number;
  readonly maxWaiters: number;
  readonly maxWaitersPerKey: number;

  // Tables, not Maps, and intrusive lists whose links are cleared on removal: see table.ts (a
  // churning Map keeps dead entries reachable from the old generation and slows every young GC).
  readonly #keys = new Table<KeyEntry>();
  /** Registration order: oldest and newest key (the sweep walks from the oldest). */
  #oldestKey: KeyEntry | undefined;
  #newestKey: KeyEntry | undefined;
  readonly #waiters = new Table<Waiter>();
  readonly #bySession = new Table<SessionWaiters>();
  readonly #deadlines = new DeadlineHeap<Waiter | ExpiryItem>();
  #lastToken: bigint;
  #seq = 0;
  /** The next key a sweep in progress will visit (undefined: start from the oldest). */
  #sweepCursor: KeyEntry | undefined;
  #sweeping = false;
  readonly #eager: boolean;

  constructor(options: TicketStateOptions) {
    if (typeof options !== 'object' || options === null) throw new TypeError('options must be an object');
    this.leaseMs = checkNumber(options.leaseMs, 'leaseMs');
    this.maxKeys = checkCount(options.maxKeys ?? DEFAULT_LIMITS.maxKeys, 'maxKeys');
    this.maxWaiters = checkCountOrZero(options.maxWaiters ?? DEFAULT_LIMITS.maxWaiters, 'maxWaiters');
    this.maxWaitersPerKey = checkCountOrZero(
      options.maxWaitersPerKey ?? DEFAULT_LIMITS.maxWaitersPerKey,
      'maxWaitersPerKey',
    );
    const last = options.lastToken ?? 0n;
    if (typeof last !== 'bigint' || last < 0n || last > MAX_TOKEN)
      throw new RangeError('lastToken must be a uint64 bigint');
    this.#lastToken = last;
    if (options.expiry !== undefined && options.expiry !== 'lazy' && options.expiry !== 'eager') {
      throw new RangeError("expiry must be 'lazy' or 'eager'");
    }
    this.#eager = options.expiry === 'eager';
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
    return this.#bySession.get(String(session)) !== undefined;
  }

  get(key: string): KeyView | undefined {
    const entry = this.#keys.get(key);
    if (entry === undefined) return undefined;
    const waiters = [];
    for (let w = entry.head; w !== undefined; w = w.next)
      waiters.push({ id: w.id, session: w.session, owner: w.owner, deadline: w.at });
    return {
      key,
      owner: entry.owner,
      token: entry.token,
      grantedAt: entry.grantedAt,
      expiresAt: entry.expiresAt,
      waiters,
    };
  }

  /** Keys whose lease has not run out at `now` and whose names start with `prefix`, at most
   * `limit`, in registration order (oldest first). Walks the table: for an operator's view. */
  held(now: number, prefix: string, limit: number): HeldKey[] {
    const out: HeldKey[] = [];
    for (let entry = this.#oldestKey; entry !== undefined && out.length < limit; entry = entry.newerKey) {
      if (now < entry.expiresAt && entry.key.startsWith(prefix)) {
        const { key, owner, token, expiresAt, waiting } = entry;
        out.push({ key, owner, token, expiresAt, waiters: waiting });
      }
    }
    return out;
  }

  /** The earliest instant at which `nextDue` will have work (a wait running out, or a key with
   * waiters expiring), or `undefined` when nothing is scheduled. */
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
    return { type: 'expire', key: item.entry.key, token: item.entry.token };
  }

  apply(command: Command, now: number): Effect[] {
    if (!(now >= 0 && now < 8.64e15)) throw new RangeError(`now must be epoch milliseconds, got ${now}`);
    switch (command.type) {
      case 'acquire':
        return this.#acquire(command.session, command.key, command.owner, command.waitMs, now);
      case 'release':
        return this.#release(command.session, command.key, command.token, now);
      case 'keep':
        return this.#keep(command.session, command.key, command.token, now);
      case 'expire':
        return this.#expire(command.key, command.token, now);
      case 'wait-timeout':
        return this.#waitTimeout(command.key, command.waiter, now);
      case 'disconnect':
        return this.#disconnect(command.session, command.notify === true);
      case 'sweep':
        return this.#sweep(command.limit ?? Infinity, now);
      case 'adopt':
        return this.#adopt(command.key, command.owner, command.token, now);
      case 'restart-lease':
        return this.#restartLease(command.key, command.token, now + checkSlack(command.slackMs ?? 0));
      default:
        throw new TypeError(`unknown command ${JSON.stringify((command as { type?: unknown }).type)}`);
    }
  }

  #acquire(session: SessionId, key: string, owner: string, waitMs: number, now: number): Effects {
    const entry = this.#keys.get(key);
    if (entry === undefined) {
      if (this.#keys.size >= this.maxKeys) return [{ type: 'busy', session, key, owner, limit: 'keys' }];
      const token = this.#issue(now);
      if (token === undefined) return [{ type: 'busy', session, key, owner, limit: 'tokens' }];
      const fresh = this.#register(key, owner, token, now);
      return [
        { type: 'granted', session, key, owner, token, expiresAt: fresh.expiresAt, path: 'free', requestedAt: now },
      ];
    }
    if (now >= entry.expiresAt) {
      // Lazy expiry: the acquire that finds the lease run out takes the key on the spot, even
      // ahead of queued waiters (the one non-FIFO path).
      const token = this.#issue(now);
      if (token === undefined) return [{ type: 'busy', session, key, owner, limit: 'tokens' }];
      const effects: Effects = [{ type: 'expired', key, owner: entry.owner, token: entry.token }];
      this.#grant(entry, owner, token, now);
      const expiresAt = entry.expiresAt;
      effects.push({ type: 'granted', session, key, owner, token, expiresAt, path: 'takeover', requestedAt: now });
      return effects;
    }
    if (waitMs === 0) return [{ type: 'timed-out', session, key, owner, reason: 'held' }];
    if (entry.waiting >= this.maxWaitersPerKey)
      return [{ type: 'busy', session, key, owner, limit: 'waiters-per-key' }];
    if (this.#waiters.size >= this.maxWaiters) return [{ type: 'busy', session, key, owner, limit: 'waiters' }];
    const id = this.#seq++;
    let mine = this.#bySession.get(String(session));
    if (mine === undefined) this.#bySession.set(String(session), (mine = { head: undefined }));
    const waiter: Waiter = {
      kind: 'wait',
      id,
      seq: id,
      at: now + waitMs,
      heapIndex: -1,
      queuedAt: now,
      session,
      owner,
      entry,
      prev: entry.tail,
      next: undefined,
      sessionPrev: undefined,
      sessionNext: mine.head,
    };
    if (mine.head !== undefined) mine.head.sessionPrev = waiter;
    mine.head = waiter;
    if (entry.tail === undefined) entry.head = waiter;
    else entry.tail.next = waiter;
    entry.tail = waiter;
    entry.waiting++;
    if (entry.waiting === 1) this.#deadlines.update(entry.expiry, entry.expiresAt);
    this.#waiters.set(String(id), waiter);
    this.#deadlines.push(waiter);
    return [{ type: 'queued', session, key, owner, waiter: id, deadline: waiter.at, position: entry.waiting }];
  }

  #adopt(key: string, owner: string, token: bigint, now: number): Effects {
    if (this.#keys.get(key) !== undefined) throw new Error(`key ${key} is already registered`);
    if (typeof token !== 'bigint' || token < 1n || token > MAX_TOKEN)
      throw new RangeError('token must be a uint64 bigint');
    const { expiresAt } = this.#register(key, owner, token, now);
    if (token > this.#lastToken) this.#lastToken = token;
    return [{ type: 'adopted', key, owner, token, expiresAt }];
  }

  #restartLease(key: string, token: bigint, from: number): Effects {
    const entry = this.#keys.get(key);
    if (entry === undefined || entry.token !== token) return [];
    this.#extend(entry, from);
    const { owner, expiresAt } = entry;
    return [{ type: 'lease-restarted', key, owner, token, expiresAt }];
  }

  /** The grant's lease counts again from `from`: its expiry moves there plus a lease, never earlier. */
  #extend(entry: KeyEntry, from: number): void {
    entry.expiresAt = Math.max(entry.expiresAt, from + this.leaseMs);
    if (entry.waiting > 0 || this.#eager) this.#deadlines.update(entry.expiry, entry.expiresAt);
  }

  #register(key: string, owner: string, token: bigint, now: number): KeyEntry {
    const seq = this.#seq++;
    const fresh: KeyEntry = {
      key,
      owner,
      token,
      grantedAt: now,
      expiresAt: now + this.leaseMs,
      head: undefined,
      tail: undefined,
      waiting: 0,
      expiry: undefined as unknown as ExpiryItem,
      olderKey: this.#newestKey,
      newerKey: undefined,
    };
    (fresh as { expiry: ExpiryItem }).expiry = { kind: 'expiry', entry: fresh, at: 0, seq, heapIndex: -1 };
    this.#keys.set(key, fresh);
    if (this.#newestKey === undefined) this.#oldestKey = fresh;
    else this.#newestKey.newerKey = fresh;
    this.#newestKey = fresh;
    if (this.#eager) this.#deadlines.update(fresh.expiry, fresh.expiresAt);
    return fresh;
  }

  #release(session: SessionId, key: string, token: bigint, now: number): Effects {
    const entry = this.#keys.get(key);
    if (entry === undefined) return [{ type: 'not-released', session, key, token, reason: 'not-registered' }];
    if (entry.token !== token) return [{ type: 'not-released', session, key, token, reason: 'token-mismatch' }];
    // Even an expired, not yet swept key is released by its exact token (docs: "R, not N").
    const effects: Effects = [{ type: 'released', session, key, token }];
    this.#handOff(entry, now, 'handoff', effects);
    return effects;
  }

  #keep(session: SessionId, key: string, token: bigint, now: number): Effects {
    const entry = this.#keys.get(key);
    if (entry === undefined) return [{ type: 'gone', session, key, token, reason: 'not-registered' }];
    if (entry.token !== token) return [{ type: 'gone', session, key, token, reason: 'token-mismatch' }];
    // Unlike a release, an expired key that is not yet swept or taken over is not kept: its lease
    // ran out, and its holder may already have stopped counting on it.
    if (now >= entry.expiresAt) return [{ type: 'gone', session, key, token, reason: 'expired' }];
    this.#extend(entry, now); // never earlier than it was
    const { owner, expiresAt } = entry;
    return [{ type: 'kept', session, key, owner, token, expiresAt, leaseMs: Math.floor(this.leaseMs) }];
  }

  #expire(key: string, token: bigint, now: number): Effects {
    const entry = this.#keys.get(key);
    if (entry === undefined || entry.token !== token || now < entry.expiresAt) return [];
    const effects: Effects = [{ type: 'expired', key, owner: entry.owner, token }];
    this.#handOff(entry, now, 'expiry', effects);
    return effects;
  }

  #waitTimeout(key: string, id: number, now: number): Effects {
    const waiter = this.#waiters.get(String(id));
    if (waiter === undefined || waiter.entry.key !== key || now < waiter.at) return [];
    this.#unqueue(waiter);
    return [{ type: 'timed-out', session: waiter.session, key, owner: waiter.owner, reason: 'waited' }];
  }

  #disconnect(session: SessionId, notify: boolean): Effects {
    const mine = this.#bySession.get(String(session));
    if (mine === undefined) return [];
    const effects: Effects = [];
    // Oldest first (the list is newest-first), so the effects come in queueing order.
    const all: Waiter[] = [];
    for (let w = mine.head; w !== undefined; w = w.sessionNext) all.push(w);
    all.sort((a, b) => a.id - b.id);
    for (const waiter of all) {
      this.#unqueue(waiter);
      const { key } = waiter.entry;
      effects.push(
        notify
          ? { type: 'timed-out', session, key, owner: waiter.owner, reason: 'cancelled' }
          : { type: 'abandoned', session, key, owner: waiter.owner, waiter: waiter.id },
      );
    }
    return effects;
  }

  #sweep(limit: number, now: number): Effects {
    const effects: Effects = [];
    let entry = this.#sweeping ? this.#sweepCursor : this.#oldestKey;
    this.#sweeping = true;
    let visited = 0;
    let removed = 0;
    while (entry !== undefined && visited < limit) {
      visited++;
      const next = entry.newerKey;
      // Keys with waiters are handed off by `expire` at their deadline, never swept.
      if (entry.waiting === 0 && now >= entry.expiresAt) {
        removed++;
        effects.push({ type: 'expired', key: entry.key, owner: entry.owner, token: entry.token });
        this.#deleteKey(entry);
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
    this.#keys.delete(entry.key);
    this.#deadlines.remove(entry.expiry);
    const { olderKey, newerKey } = entry;
    if (olderKey === undefined) this.#oldestKey = newerKey;
    else olderKey.newerKey = newerKey;
    if (newerKey === undefined) this.#newestKey = olderKey;
    else newerKey.olderKey = olderKey;
    // A sweep in progress resumes at the next key instead.
    if (this.#sweepCursor === entry) this.#sweepCursor = newerKey;
    entry.olderKey = entry.newerKey = undefined;
  }

  /** Gives the key to the first waiter whose wait has not run out; deletes it when none is left. */
  #handOff(entry: KeyEntry, now: number, path: 'handoff' | 'expiry', effects: Effects): void {
    for (let waiter = entry.head; waiter !== undefined; waiter = entry.head) {
      this.#unqueue(waiter);
      if (waiter.at <= now) {
        effects.push({
          type: 'timed-out',
          session: waiter.session,
          key: entry.key,
          owner: waiter.owner,
          reason: 'waited',
        });
        continue;
      }
      const token = this.#issue(now);
      if (token === undefined) {
        effects.push({ type: 'busy', session: waiter.session, key: entry.key, owner: waiter.owner, limit: 'tokens' });
        continue;
      }
      this.#grant(entry, waiter.owner, token, now);
      effects.push({
        type: 'granted',
        session: waiter.session,
        key: entry.key,
        owner: waiter.owner,
        token,
        expiresAt: entry.expiresAt,
        path,
        requestedAt: waiter.queuedAt,
      });
      return;
    }
    this.#deleteKey(entry);
  }

  #grant(entry: KeyEntry, owner: string, token: bigint, now: number): void {
    entry.owner = owner;
    entry.token = token;
    entry.grantedAt = now;
    entry.expiresAt = now + this.leaseMs;
    if (entry.waiting > 0 || this.#eager) this.#deadlines.update(entry.expiry, entry.expiresAt);
  }

  #unqueue(waiter: Waiter): void {
    const { entry } = waiter;
    if (waiter.prev === undefined) entry.head = waiter.next;
    else waiter.prev.next = waiter.next;
    if (waiter.next === undefined) entry.tail = waiter.prev;
    else waiter.next.prev = waiter.prev;
    waiter.prev = waiter.next = undefined;
    entry.waiting--;
    if (entry.waiting === 0 && !this.#eager) this.#deadlines.remove(entry.expiry);
    this.#deadlines.remove(waiter);
    this.#waiters.delete(String(waiter.id));
    const mine = this.#bySession.get(String(waiter.session))!;
    if (waiter.sessionPrev === undefined) mine.head = waiter.sessionNext;
    else waiter.sessionPrev.sessionNext = waiter.sessionNext;
    if (waiter.sessionNext !== undefined) waiter.sessionNext.sessionPrev = waiter.sessionPrev;
    waiter.sessionPrev = waiter.sessionNext = undefined;
    if (mine.head === undefined) this.#bySession.delete(String(waiter.session));
  }

  /**
   * Tokens: max(last + 1, wall-clock microseconds). Strictly increasing across the whole server
   * (not per key), and greater than anything an earlier process issued as long as the clock did
   * not step back (the server's optional state file covers that case). `undefined` at 2^64-1.
   */
  /** The kernel's token rule, max(last + 1, wall-clock µs), shared with the file lease. */
  #issue(now: number): bigint | undefined {
    const token = nextToken(this.#lastToken, now);
    if (token !== undefined) this.#lastToken = token;
    return token;
  }
}

/** Counts: whole numbers, the kernel's rule. */
const checkCount = (value: unknown, what: string): number =>
  checkNumber(value, what, { integer: true, max: Number.MAX_SAFE_INTEGER });
const checkCountOrZero = (value: unknown, what: string): number =>
  checkNumber(value, what, { zero: true, integer: true, max: Number.MAX_SAFE_INTEGER });
/** A lease restart's slack: at most a timer's longest delay, so the expiry stays epoch ms. */
const checkSlack = (value: unknown): number => checkNumber(value, 'slackMs', { zero: true, max: MAX_TIMER_MS });
