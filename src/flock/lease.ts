/**
 * The single-host session lease over a lease directory (port of the Go original).
 *
 * A stable `<safeID>.lock` flock serializes record transitions only; each lease generation keeps
 * its own `<safeID>.<token>.live` flock for its whole life, so the kernel tells everyone the moment
 * a holder dies; `<safeID>.lease.json` records owner, token and expiry. See README "How it works".
 */
import { join, resolve } from 'node:path';
import {
  LeaseCorruptError,
  LeaseHeldError,
  LeaseTimeoutError,
  LeaseTokenExhaustedError,
  type LeaseHolder,
} from '../port/errors.js';
import { channels, publish } from '../port/events.js';
import { holdLease, type HoldOptions, type LeaseHold } from '../port/hold.js';
import { nextToken } from '../port/token.js';
import { yieldIfStarving } from '../port/turn.js';
import type { AcquireOptions, LeaseGrant, LeaseOptions, OperationOptions, SessionLease } from '../port/types.js';
import {
  checkExpiry,
  checkGrant,
  checkOptions,
  checkOwner,
  checkPositiveMs,
  checkSessionId,
  checkSignal,
  MAX_EXPIRY_MS,
  readClock,
  resolveClock,
  resolveTtl,
  resolveWaitMs,
} from '../port/validate.js';
import { sleep } from '../port/abort.js';
import { KeyedGate } from './gate.js';
import { fileIO, type CommitError, type CommitPlan, type CommitResult, type LeaseIO } from './io.js';
import { liveName, lockName, recordName, safeID, waitName } from './layout.js';
import { formatQueue, MAX_QUEUE_TEXT, nextTicket, parseQueue, type QueuedWaiter, type WaitQueue } from './queue.js';
import { expiresAtMs, formatRecord, isExpired, parseRecord, RecordFormatError, type LeaseRecord } from './record.js';
import { whenUnlocked } from './watch.js';

export interface FileLeaseOptions extends LeaseOptions {
  /** How long an operation waits for another process's transition (one operation, normally
   * microseconds) before failing with LeaseTimeoutError. Default: min(ttlMs, 10 000). */
  readonly transitionTimeoutMs?: number | undefined;
}

/** Internal: the I/O layer to use (tests inject faults through it). Not part of the public API. */
export const kIO = Symbol('flocklease.io');

/** A generation whose liveness lock this process holds. */
interface Generation {
  readonly token: bigint;
  readonly owner: string;
  readonly fd: number;
}

/** Cleanup that failed and is retried on the next operation for the same id. */
interface Pending {
  readonly closes: Set<number>;
  readonly removals: Set<string>;
}

/** A waiting acquire's place in the id's queue, once it has one. */
interface WaitLine {
  readonly owner: string;
  ticket?: number;
  fd?: number;
}

/** One try of a (possibly waiting) acquire: the grant, or why not and what to wait for. */
type Attempt =
  | { readonly grant: LeaseGrant }
  | {
      readonly refusal: LeaseHeldError;
      /** A lock file whose release is worth waking for (the holder's .live, or the front waiter's .wait). */
      readonly watch: string | undefined;
      /** Clock time (epoch ms) at which to look again regardless (the holder's expiry, a waiter's grace). */
      readonly until: number | undefined;
    };

type TakeoverReason = 'free' | 'released' | 'expired' | 'crashed';

/** Tries of a busy transition lock that just yield to the event loop before waiting in the kernel. */
const TRANSITION_YIELDS = 3;
/** How long a free lease stays reserved for a queued waiter that is alive but does not come for
 * it (stopped, or its event loop blocked) before the next one may go first. */
const WAITER_GRACE_MAX_MS = 1_000;
/** Beyond this many queued tickets, dead ones are pruned anywhere in the queue, not just in front. */
const QUEUE_PRUNE_AT = 16;


export class Lease implements SessionLease {
  readonly dir: string;
  readonly ttlMs: number;
  readonly transitionTimeoutMs: number;
  readonly #clock: () => number;
  readonly #io: LeaseIO;
  readonly #gate = new KeyedGate();
  /** safeID → the generation this process holds. Raw fds in a strong map: a FileHandle could be
   * closed by garbage collection, silently dropping the lock. */
  readonly #held = new Map<string, Generation>();
  readonly #pending = new Map<string, Pending>();
  /** safeID → waiting acquires of this process, woken when this process changes that lease. */
  readonly #wakers = new Map<string, Set<() => void>>();
  #dirReady = false;

  constructor(dir: string, options: FileLeaseOptions = {}) {
    if (typeof dir !== 'string' || dir === '') throw new TypeError('dir must be a non-empty string');
    checkOptions(options, 'options');
    this.#clock = resolveClock(options.clock);
    this.ttlMs = resolveTtl(options.ttlMs, readClock(this.#clock));
    checkPositiveMs(options.transitionTimeoutMs, 'transitionTimeoutMs');
    this.transitionTimeoutMs = options.transitionTimeoutMs ?? Math.min(this.ttlMs, 10_000);
    this.dir = resolve(dir);
    this.#io = (options as { [kIO]?: LeaseIO })[kIO] ?? fileIO;
  }

  /**
   * Acquires the lease for `owner`, or throws LeaseHeldError. With `waitMs`, waits (in arrival
   * order with other waiters) for the holder to release, die or expire.
   */
  async acquire(sessionId: string, owner: string, options?: AcquireOptions): Promise<LeaseGrant> {
    checkSessionId(sessionId);
    checkOwner(owner);
    const signal = operationSignal(options);
    const waitMs = resolveWaitMs(options?.waitMs);
    if (waitMs > 0) return this.#acquireWaiting(sessionId, owner, waitMs, signal);
    const attempt = await this.#transition(sessionId, signal, true, (safe, now, lockFd) =>
      this.#attempt(safe, sessionId, owner, now, lockFd, undefined),
    );
    if ('grant' in attempt) return attempt.grant;
    throw attempt.refusal;
  }

  async renew(grant: LeaseGrant, options?: OperationOptions): Promise<LeaseGrant> {
    checkGrant(grant);
    const { sessionId, owner, token } = grant;
    const signal = operationSignal(options);
    return this.#transition(sessionId, signal, false, async (safe, now) => {
      const expiryMs = now + this.ttlMs;
      checkExpiry(expiryMs);
      const held = this.#held.get(safe);
      // No handle here: a prior renew declared loss, or this grant was never this process's.
      if (held?.token !== token || held.owner !== owner) {
        publish(channels.loss, () => ({ lease: this, sessionId, owner, token }));
        throw new LeaseHeldError(`lease ${JSON.stringify(sessionId)} is not held by ${owner} with token ${token} in this process`, sessionId);
      }
      const record = this.#readRecord(safe);
      if (record?.owner !== owner || record.token !== token) {
        // A competitor took over (or an operator broke the lease): definitive loss.
        this.#dropGeneration(safe, held);
        const holder = record && holderOf(record);
        publish(channels.loss, () => ({ lease: this, sessionId, owner, token, holder }));
        throw new LeaseHeldError(
          `lease ${JSON.stringify(sessionId)} was lost: ${record === undefined ? 'its record is gone' : describe(record)}`,
          sessionId,
          holder,
        );
      }
      // Still ours, even if it had expired: nobody took it over meanwhile (the sleep-past-TTL reclaim).
      await this.#commit(safe, { owner, token, expiryMs, session: sessionId });
      const renewed = grantOf(sessionId, owner, token, expiryMs);
      if (isExpired(record, now)) publish(channels.reclaim, () => ({ lease: this, grant: renewed, expiredAt: new Date(record.expiryMs) }));
      else publish(channels.renew, () => ({ lease: this, grant: renewed }));
      return renewed;
    });
  }

  async release(grant: LeaseGrant, options?: OperationOptions): Promise<void> {
    checkGrant(grant);
    const { sessionId, owner, token } = grant;
    const signal = operationSignal(options);
    const safe = safeID(sessionId);
    // Unknown, stale or already released, and nothing to retry: a no-op that needs no lock.
    if (!this.#holds(safe, owner, token) && !this.#pending.has(safe) && this.#gate.size === 0) return;
    await this.#transition(sessionId, signal, false, async (safe, now, lockFd) => {
      const held = this.#held.get(safe);
      if (held?.token !== token || held.owner !== owner) return;
      const record = this.#readRecord(safe);
      if (record?.owner !== owner || record.token !== token) {
        // A successor owns the record: let go of our handle, touch nothing of theirs.
        this.#dropGeneration(safe, held);
        return;
      }
      const ourLive = join(this.dir, liveName(safe, token));
      try {
        for (;;) {
          const handOff = this.#nextInLine(safe, lockFd, token, now);
          if (handOff === undefined) {
            await this.#commit(safe, { owner: '', token, expiryMs: now, session: sessionId }, { remove: [ourLive] });
            break;
          }
          // Hand the lease straight to the front waiter: its flocked .wait file becomes the new
          // generation's .live (a rename keeps the inode and so the flock), the record names it.
          const { waiter, next, queue } = handOff;
          const live = join(this.dir, liveName(safe, next));
          const adoptFrom = join(this.dir, waitName(safe, waiter.ticket));
          queue.waiters.shift();
          queue.freeSince = 0;
          try {
            await this.#commit(safe, { owner: waiter.owner, token: next, expiryMs: now + waiter.ttlMs, session: sessionId }, { live, adoptFrom, remove: [ourLive] });
          } catch (error) {
            const failure = error as CommitError;
            // The waiter gave up just now (it removes its .wait file without our lock): nothing
            // changed, so hand to the next one in line instead.
            if (failure.committed || failure.code !== 'ENOENT' || failure.path !== adoptFrom) throw error;
            this.#io.writeLockData(lockFd, formatQueue(queue));
            continue;
          }
          this.#io.writeLockData(lockFd, formatQueue(queue));
          break;
        }
      } catch (error) {
        // Record replaced but not durable (directory fsync failed): released all the same.
        if ((error as CommitError).committed) this.#dropGeneration(safe, held);
        throw error;
      }
      this.#dropGeneration(safe, held);
      publish(channels.release, () => ({ lease: this, grant }));
    });
    this.#wake(safe);
  }

  /**
   * The queued waiter a release hands the lease to: the first live one (dead ones are dropped),
   * with the token it gets. Under the transition lock.
   */
  #nextInLine(safe: string, lockFd: number, token: bigint, now: number): { waiter: QueuedWaiter; next: bigint; queue: WaitQueue } | undefined {
    const queue = parseQueue(this.#io.readLockData(lockFd));
    if (queue.waiters.length === 0) return undefined;
    const original = formatQueue(queue);
    let found: QueuedWaiter | undefined;
    while (queue.waiters.length > 0) {
      const front = queue.waiters[0]!;
      const path = join(this.dir, waitName(safe, front.ticket));
      if (this.#io.probeLive(path) && now + front.ttlMs <= MAX_EXPIRY_MS) {
        found = front;
        break;
      }
      queue.waiters.shift(); // its process is gone
      this.#removeQuietly(path);
    }
    const next = nextToken(token, now);
    if (found === undefined || next === undefined) {
      if (formatQueue(queue) !== original) this.#io.writeLockData(lockFd, formatQueue(queue));
      return undefined;
    }
    return { waiter: found, next, queue };
  }

  /**
   * Acquires and keeps renewing (about every ttlMs/3) until released or lost; `hold.signal`
   * aborts on loss. `await using hold = await lease.hold(id, owner)` releases at scope end.
   */
  hold(sessionId: string, owner: string, options?: HoldOptions): Promise<LeaseHold> {
    return holdLease(this, this.ttlMs, this.#clock, sessionId, owner, options);
  }

  /** One try: the grant, or the refusal and what to wait for. Runs under the transition lock. */
  async #attempt(safe: string, sessionId: string, owner: string, now: number, lockFd: number, line: WaitLine | undefined): Promise<Attempt> {
    const expiryMs = now + this.ttlMs;
    checkExpiry(expiryMs);
    const record = this.#readRecord(safe);
    if (line?.fd !== undefined && record?.owner === owner && this.#io.sameFile(line.fd, join(this.dir, liveName(safe, record.token)))) {
      return this.#adopt(safe, sessionId, owner, now, record, line.fd, line);
    }
    const held = this.#held.get(safe);
    let reason: TakeoverReason;
    if (record === undefined) reason = 'free';
    else if (record.owner === '') reason = 'released';
    // Expired: replaceable even if the old process is alive and still holds its .live.
    else if (isExpired(record, now)) reason = 'expired';
    else {
      const live = join(this.dir, liveName(safe, record.token));
      if (held?.token === record.token) {
        // This process holds the live generation: only its own owner may refresh it.
        if (record.owner === owner) {
          await this.#commit(safe, { owner, token: record.token, expiryMs, session: sessionId });
          const grant = grantOf(sessionId, owner, record.token, expiryMs);
          publish(channels.acquire, () => ({ lease: this, grant, refreshed: true }));
          return { grant };
        }
        return this.#refuse(safe, lockFd, now, line, heldError(sessionId, record), live, expiresAtMs(record));
      }
      // Unexpired and not ours (same owner without the local handle gets no favour): ask the kernel.
      if (this.#io.probeLive(live)) return this.#refuse(safe, lockFd, now, line, heldError(sessionId, record), live, expiresAtMs(record));
      reason = 'crashed';
    }

    // Takeable. Queued waiters go first, in arrival order.
    const queue = parseQueue(this.#io.readLockData(lockFd));
    if (queue.waiters.length > 0) {
      const original = formatQueue(queue);
      const ahead = this.#waiterAhead(safe, queue, line?.ticket, now);
      if (ahead !== undefined) {
        const refusal = new LeaseHeldError(
          `lease ${JSON.stringify(sessionId)} is free but reserved for a queued waiter (ticket ${ahead})`,
          sessionId,
          record && holderOf(record), // what the record says (expired, released): like any refusal
        );
        const watch = join(this.dir, waitName(safe, ahead));
        return this.#refuse(safe, lockFd, now, line, refusal, watch, queue.freeSince + this.#waiterGraceMs, { queue, original });
      }
      const mine = queue.waiters.findIndex((w) => w.ticket === line?.ticket);
      if (mine >= 0) queue.waiters.splice(mine, 1);
      queue.freeSince = 0;
      this.#io.writeLockData(lockFd, formatQueue(queue));
    }
    // Out of line first: our .wait file must not linger as a lock of this process.
    this.#leaveLine(safe, line);
    const grant = await this.#takeOver(safe, sessionId, owner, record, expiryMs, now, reason);
    return { grant };
  }

  /** A release handed us the lease while we waited: our .wait file is its .live. */
  async #adopt(safe: string, sessionId: string, owner: string, now: number, record: LeaseRecord, fd: number, line: WaitLine): Promise<Attempt> {
    const predecessor = this.#held.get(safe);
    if (predecessor !== undefined) this.#dropGeneration(safe, predecessor);
    this.#held.set(safe, { token: record.token, owner, fd });
    line.fd = undefined;
    line.ticket = undefined;
    let expiryMs = record.expiryMs;
    if (isExpired(record, now)) {
      // Woken too late to find it fresh: nobody took it meanwhile, so keep it as a renew would.
      expiryMs = now + this.ttlMs;
      await this.#commit(safe, { owner, token: record.token, expiryMs, session: sessionId });
    }
    const grant = grantOf(sessionId, owner, record.token, expiryMs);
    publish(channels.acquire, () => ({ lease: this, grant, refreshed: false }));
    publish(channels.takeover, () => ({ lease: this, grant, reason: 'handoff' as const }));
    return { grant };
  }

  get #waiterGraceMs(): number {
    return Math.min(this.ttlMs, WAITER_GRACE_MAX_MS);
  }

  /**
   * The live waiter a free lease is reserved for, unless it is `mine`. Drops dead waiters from the
   * front, and skips one that has not come for the lease within the grace (it rejoins at the back
   * when it wakes). Changes `queue` in place; the caller writes it back. Under the transition lock.
   */
  #waiterAhead(safe: string, queue: WaitQueue, mine: number | undefined, now: number): number | undefined {
    while (queue.waiters.length > 0) {
      const front = queue.waiters[0]!.ticket;
      if (front === mine) return undefined;
      const path = join(this.dir, waitName(safe, front));
      if (!this.#io.probeLive(path)) {
        queue.waiters.shift(); // its process is gone
        queue.freeSince = 0;
        this.#removeQuietly(path);
        continue;
      }
      if (queue.freeSince === 0) queue.freeSince = now;
      if (now - queue.freeSince < this.#waiterGraceMs) return front;
      queue.waiters.shift(); // alive but not coming: let the next one go
      queue.freeSince = now;
    }
    return undefined;
  }

  /** A refusal; a waiting acquire also takes (or keeps) its place in the queue here. `known` is
   * the queue as already read (and maybe changed) under this transition, with its text as read. */
  #refuse(
    safe: string,
    lockFd: number,
    now: number,
    line: WaitLine | undefined,
    refusal: LeaseHeldError,
    watch: string,
    until: number,
    known?: { queue: WaitQueue; original: string },
  ): Attempt {
    let queue = known?.queue;
    let original = known?.original;
    if (line !== undefined) {
      if (queue === undefined) {
        queue = parseQueue(this.#io.readLockData(lockFd));
        original = formatQueue(queue);
      }
      if (line.ticket === undefined || !queue.waiters.some((w) => w.ticket === line.ticket)) {
        // First refusal, or skipped while away: (re)join at the back.
        this.#leaveLine(safe, line);
        if (queue.waiters.length > QUEUE_PRUNE_AT) this.#pruneDeadWaiters(safe, queue);
        const waiter = { ticket: nextTicket(queue, now), owner: line.owner, ttlMs: this.ttlMs };
        queue.waiters.push(waiter);
        const fits = formatQueue(queue).length <= MAX_QUEUE_TEXT;
        const fd = fits ? this.#io.lockFile(join(this.dir, waitName(safe, waiter.ticket))) : undefined;
        if (fd === undefined) queue.waiters.pop(); // queue full: wait unqueued, like a non-waiting acquire that retries
        else Object.assign(line, { ticket: waiter.ticket, fd });
      }
    }
    if (queue !== undefined && formatQueue(queue) !== original) this.#io.writeLockData(lockFd, formatQueue(queue));
    const place = line?.ticket === undefined ? -1 : queue!.waiters.findIndex((w) => w.ticket === line.ticket);
    if (place > 0) {
      // Behind someone: watch the .wait file of the waiter just ahead. It fires when that waiter
      // leaves the line (gave up, or died) — or, once it was handed the lease and its .wait file
      // became the .live, when it releases: exactly when our turn comes. So a release wakes one
      // waiter, not the queue. Look again after the grace regardless (a stopped front waiter).
      const ahead = join(this.dir, waitName(safe, queue!.waiters[place - 1]!.ticket));
      return { refusal, watch: ahead, until: now + this.#waiterGraceMs };
    }
    return { refusal, watch, until };
  }

  #pruneDeadWaiters(safe: string, queue: WaitQueue): void {
    for (let i = queue.waiters.length - 1; i >= 0; i--) {
      const path = join(this.dir, waitName(safe, queue.waiters[i]!.ticket));
      if (!this.#io.probeLive(path)) {
        queue.waiters.splice(i, 1);
        this.#removeQuietly(path);
      }
    }
  }

  /** Gives up a place in the queue: the entry goes stale and is pruned by whoever meets it. */
  #leaveLine(safe: string, line: WaitLine | undefined): void {
    if (line?.fd === undefined) return;
    this.#closeOrDefer(safe, line.fd);
    this.#removeQuietly(join(this.dir, waitName(safe, line.ticket!)));
    line.fd = undefined;
    line.ticket = undefined;
  }

  async #acquireWaiting(sessionId: string, owner: string, waitMs: number, signal: AbortSignal | undefined): Promise<LeaseGrant> {
    const deadline = performance.now() + waitMs;
    const safe = safeID(sessionId);
    const line: WaitLine = { owner };
    try {
      for (let idleRounds = 0, lastWatch: string | undefined; ; ) {
        const attempt = await this.#transition(
          sessionId,
          signal,
          true,
          (safe, now, lockFd) => this.#attempt(safe, sessionId, owner, now, lockFd, line),
          deadline,
        );
        if ('grant' in attempt) return attempt.grant;
        // Rounds that end at once on the same watch saw no change: pause a little so we never spin.
        if (idleRounds > 2) await sleep(Math.min(2 ** idleRounds, 50), signal);
        const left = deadline - performance.now();
        if (left <= 0) throw attempt.refusal;
        const started = performance.now();
        await this.#waitForChange(safe, attempt, left, signal);
        const adopted = await this.#adoptHandOff(safe, sessionId, owner, line, signal);
        if (adopted !== undefined) return adopted;
        idleRounds = performance.now() - started < 1 && attempt.watch === lastWatch ? idleRounds + 1 : 0;
        lastWatch = attempt.watch;
      }
    } finally {
      if (line.fd !== undefined) {
        this.#leaveLine(safe, line);
        this.#wake(safe); // whoever queued behind us may be first now
      }
    }
  }

  /**
   * The fast path after a wake-up: if a release handed us the lease, take it without the transition
   * lock — the record is replaced atomically, and our own flock on the handed-over file is what
   * keeps everyone else off an unexpired lease. (Expired, or anything else: the locked path.)
   */
  async #adoptHandOff(safe: string, sessionId: string, owner: string, line: WaitLine, signal: AbortSignal | undefined): Promise<LeaseGrant | undefined> {
    if (line.fd === undefined) return undefined;
    const leave = await this.#gate.enter(safe, signal);
    try {
      const record = this.#readRecord(safe);
      const now = readClock(this.#clock);
      if (line.fd === undefined || record?.owner !== owner || isExpired(record, now)) return undefined;
      if (!this.#io.sameFile(line.fd, join(this.dir, liveName(safe, record.token)))) return undefined;
      const attempt = await this.#adopt(safe, sessionId, owner, now, record, line.fd, line);
      return 'grant' in attempt ? attempt.grant : undefined;
    } finally {
      leave();
    }
  }

  /** Sleeps until the holder (or the waiter ahead) lets go, `until` passes, this process changes
   * the lease, the wait runs out, or `signal` aborts (which rejects). */
  async #waitForChange(
    safe: string,
    attempt: Extract<Attempt, { refusal: LeaseHeldError }>,
    leftMs: number,
    signal: AbortSignal | undefined,
  ): Promise<void> {
    const round = new AbortController();
    const wakers = this.#wakers.get(safe) ?? new Set();
    this.#wakers.set(safe, wakers);
    let wake!: () => void;
    const woken = new Promise<void>((resolve) => (wake = resolve));
    wakers.add(wake);
    const onAbort = (): void => round.abort();
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const untilMs = attempt.until === undefined ? Infinity : Math.max(0, attempt.until - readClock(this.#clock)) + 1;
      const events = [woken, sleep(Math.min(leftMs, untilMs), round.signal).catch(() => {})];
      if (attempt.watch !== undefined) events.push(whenUnlocked(this.#io, attempt.watch, round.signal));
      await Promise.race(events);
      signal?.throwIfAborted();
    } finally {
      round.abort();
      signal?.removeEventListener('abort', onAbort);
      wakers.delete(wake);
      if (wakers.size === 0) this.#wakers.delete(safe);
    }
  }

  /** Wakes this process's waiting acquires on `safe` to look again. */
  #wake(safe: string): void {
    const wakers = this.#wakers.get(safe);
    if (wakers !== undefined) for (const wake of wakers) wake();
  }

  /** Runs `body` with the id's in-process gate and cross-process transition lock held. */
  async #transition<T>(
    sessionId: string,
    signal: AbortSignal | undefined,
    failClosed: boolean,
    body: (safe: string, now: number, lockFd: number) => Promise<T>,
    deadline = performance.now() + this.transitionTimeoutMs,
  ): Promise<T> {
    signal?.throwIfAborted();
    const safe = safeID(sessionId);
    const leave = await this.#gate.enter(safe, signal);
    try {
      const lockFd = await this.#lockTransition(safe, sessionId, signal, deadline);
      try {
        this.#retryPending(safe, failClosed);
        return await body(safe, readClock(this.#clock), lockFd);
      } finally {
        this.#io.unlockTransition(lockFd);
      }
    } finally {
      leave();
      await yieldIfStarving(); // on tmpfs nothing above touched the event loop
    }
  }

  async #lockTransition(safe: string, sessionId: string, signal: AbortSignal | undefined, deadline: number): Promise<number> {
    const path = join(this.dir, lockName(safe));
    for (let tries = 0; ; tries++) {
      const fd = this.#tryLockTransition(path);
      if (typeof fd === 'number') return fd;
      if (fd === 'replaced') continue; // the lock file was pruned under us: lock the new one
      const left = deadline - performance.now();
      if (left <= 0) {
        throw new LeaseTimeoutError(
          `the transition lock ${path} was not free in time: another process is in (or stopped in) an operation on this id`,
          sessionId,
        );
      }
      // Another process is mid-operation, normally for microseconds: yield a few times, then wait
      // in the kernel (a watcher thread blocked in flock) for it to finish, bounded by the deadline.
      if (tries < TRANSITION_YIELDS) await yieldToLoop(signal);
      else await this.#waitForLock(path, left, signal);
    }
  }

  async #waitForLock(path: string, leftMs: number, signal: AbortSignal | undefined): Promise<void> {
    const round = new AbortController();
    const onAbort = (): void => round.abort();
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      await Promise.race([whenUnlocked(this.#io, path, round.signal), sleep(leftMs, round.signal).catch(() => {})]);
      signal?.throwIfAborted();
    } finally {
      round.abort();
      signal?.removeEventListener('abort', onAbort);
    }
  }

  #tryLockTransition(path: string): number | 'busy' | 'replaced' {
    if (!this.#dirReady) {
      this.#io.prepareDir(this.dir);
      this.#dirReady = true;
    }
    try {
      return this.#io.tryLockTransition(path);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      // The directory was removed since we prepared it: recreate it once.
      this.#io.prepareDir(this.dir);
      return this.#io.tryLockTransition(path);
    }
  }

  /** Takes over: new token, new liveness lock, then the record (the commit point). */
  async #takeOver(
    safe: string,
    sessionId: string,
    owner: string,
    record: LeaseRecord | undefined,
    expiryMs: number,
    now: number,
    reason: TakeoverReason,
  ): Promise<LeaseGrant> {
    const token = nextToken(record?.token ?? 0n, now);
    if (token === undefined) {
      throw new LeaseTokenExhaustedError(`lease ${JSON.stringify(sessionId)} has used every uint64 fencing token`, sessionId);
    }
    const predecessor = this.#held.get(safe);
    if (predecessor !== undefined) {
      // Fail closed: never hold two generations of one id. If this close throws, nothing changed.
      this.#io.closeFile(predecessor.fd);
      this.#held.delete(safe);
    }
    const live = join(this.dir, liveName(safe, token));
    const remove = record === undefined ? [] : [join(this.dir, liveName(safe, record.token))];
    let liveFd: number;
    try {
      ({ liveFd } = await this.#commit(safe, { owner, token, expiryMs, session: sessionId }, { live, remove }));
    } catch (error) {
      const failure = error as CommitError;
      if (failure.committed && failure.liveFd !== undefined) {
        // The record names us (only its directory fsync failed): hold the generation, finish cleanup later.
        this.#held.set(safe, { token, owner, fd: failure.liveFd });
        for (const path of remove) this.#pendingFor(safe).removals.add(path);
      }
      // A process that wrote no record holds a token this new: treat it as a live competitor.
      if (failure.syscall === 'flock' && failure.code === 'EAGAIN') {
        throw new LeaseHeldError(`lease ${JSON.stringify(sessionId)}: ${live} is locked by another process`, sessionId);
      }
      throw error; // before the commit point the addon has undone the new generation: the old record stands
    }
    this.#held.set(safe, { token, owner, fd: liveFd });
    const grant = grantOf(sessionId, owner, token, expiryMs);
    publish(channels.acquire, () => ({ lease: this, grant, refreshed: false }));
    if (record !== undefined && reason !== 'free') {
      publish(channels.takeover, () => ({ lease: this, grant, reason, previous: holderOf(record) }));
    }
    this.#wake(safe); // local waiters now wait on the new holder
    return grant;
  }

  #holds(safe: string, owner: string, token: bigint): boolean {
    const held = this.#held.get(safe);
    return held?.token === token && held.owner === owner;
  }

  #readRecord(safe: string): LeaseRecord | undefined {
    const path = join(this.dir, recordName(safe));
    const bytes = this.#io.readRecord(path);
    if (bytes === undefined) return undefined;
    try {
      return parseRecord(bytes);
    } catch (error) {
      if (!(error instanceof RecordFormatError)) throw error;
      throw new LeaseCorruptError(`${path}: ${error.message}; nothing was changed (see \`flocklease repair\`)`, path, { cause: error });
    }
  }

  /** Writes the record (and whatever else the plan says) as one step; defers failed removals. */
  async #commit(safe: string, record: LeaseRecord, plan?: Omit<CommitPlan, 'record' | 'data'>): Promise<CommitResult> {
    const result = await this.#io.commit(this.dir, { ...plan, record: join(this.dir, recordName(safe)), data: formatRecord(record) });
    for (const failure of result.removalErrors) {
      if (failure.path !== undefined) this.#pendingFor(safe).removals.add(failure.path);
    }
    return result;
  }

  /** Forgets a generation and closes its liveness lock; a failed close is retried later. */
  #dropGeneration(safe: string, generation: Generation): void {
    this.#held.delete(safe);
    this.#closeOrDefer(safe, generation.fd);
  }

  #closeOrDefer(safe: string, fd: number): void {
    try {
      this.#io.closeFile(fd);
    } catch {
      this.#pendingFor(safe).closes.add(fd); // the generation is still held here: retry, never forget it
    }
  }

  #removeQuietly(path: string): void {
    try {
      this.#io.removeFile(path);
    } catch {
      // A leftover .wait file of a dead waiter is harmless (nobody holds it); prune takes it later.
    }
  }

  #pendingFor(safe: string): Pending {
    let pending = this.#pending.get(safe);
    if (pending === undefined) this.#pending.set(safe, (pending = { closes: new Set(), removals: new Set() }));
    return pending;
  }

  /** Retries cleanup an earlier operation on this id could not finish. Under `failClosed`
   * (acquire) a predecessor generation that still will not close stops the operation. */
  #retryPending(safe: string, failClosed: boolean): void {
    const pending = this.#pending.get(safe);
    if (pending === undefined) return;
    for (const fd of pending.closes) {
      try {
        this.#io.closeFile(fd);
        pending.closes.delete(fd);
      } catch (error) {
        if (failClosed) throw error;
      }
    }
    for (const path of pending.removals) {
      try {
        this.#io.removeFile(path);
        pending.removals.delete(path);
      } catch {
        // Still failing: an orphan .live file is harmless (nobody holds it); keep trying.
      }
    }
    if (pending.closes.size === 0 && pending.removals.size === 0) this.#pending.delete(safe);
  }
}

function yieldToLoop(signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) =>
    setImmediate(() => (signal?.aborted ? reject(signal.reason) : resolve())),
  );
}

function operationSignal(options: OperationOptions | undefined): AbortSignal | undefined {
  checkOptions(options, 'options');
  checkSignal(options?.signal);
  return options?.signal;
}

function grantOf(sessionId: string, owner: string, token: bigint, expiryMs: number): LeaseGrant {
  return Object.freeze({ sessionId, owner, token, expiry: new Date(expiryMs) });
}

function holderOf(record: LeaseRecord): LeaseHolder {
  return Object.freeze({ owner: record.owner, token: record.token, expiry: new Date(record.expiryMs) });
}

function describe(record: LeaseRecord): string {
  return record.owner === ''
    ? `it was released (token ${record.token})`
    : `${record.owner} holds it with token ${record.token} until ${new Date(record.expiryMs).toISOString()}`;
}

function heldError(sessionId: string, record: LeaseRecord): LeaseHeldError {
  return new LeaseHeldError(`lease ${JSON.stringify(sessionId)} is held: ${describe(record)}`, sessionId, holderOf(record));
}
