/**
 * The single-host session lease over a lease directory (port of the Go original).
 *
 * A stable `<safeID>.lock` flock serializes record transitions only; each lease generation keeps
 * its own `<safeID>.<token>.live` flock for its whole life, so the kernel tells everyone the moment
 * a holder dies; `<safeID>.lease.json` records owner, token and expiry. See README "How it works".
 */
import { resolve } from 'node:path';
import { LeaseHeldError, LeaseTokenExhaustedError } from '../port/errors.js';
import { publish } from '../kernel/events.js';
import { channels } from '../port/events.js';
import { holdLease, type HoldOptions, type LeaseHold } from '../port/hold.js';
import { nextToken } from '../kernel/token.js';
import { yieldIfRunStarts, yieldIfStarving } from '../port/turn.js';
import type { AcquireOptions, LeaseGrant, LeaseOptions, OperationOptions, SessionLease } from '../port/types.js';
import {
  checkExpiry,
  checkGrant,
  checkOptions,
  checkOwner,
  checkPositiveMs,
  checkSessionId,
  checkSignal,
  readClock,
  resolveClock,
  resolveTtl,
  resolveWaitMs,
} from '../port/validate.js';
import { sleep } from '../port/abort.js';
import { KeyedGate } from './gate.js';
import { fileIO, type CommitError, type CommitPlan, type CommitResult, type HandOffProbe, type LeaseIO } from './io.js';
import { DirPaths, LIVE_SUFFIX, safeID, WAIT_SUFFIX } from './layout.js';
import {
  expiresAtMs,
  formatRecord,
  holderOf,
  isExpired,
  parseRfc3339Instant,
  recordLayout,
  type LeaseRecord,
} from './record.js';
import { lockTransition, readRecordAt } from './transition.js';
import { WaitLine, type HandOff, type Place, type Refused, type TransitionContext } from './waitline.js';
import { NO_HAND_OFF, waitForUnlock, type HandOffWatch } from './watch.js';

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

/** One try of a (possibly waiting) acquire: the grant, or why not and what to wait for. */
type Attempt = { readonly grant: LeaseGrant } | Refused;

/** What an acquire finds, in the order it looks (the Go original's switch, plus the hand-off). */
type LeaseState =
  | 'handed-over' // a release handed it to this waiting acquire
  | 'free' // no record
  | 'released' // a tombstone
  | 'expired' // replaceable even if the old process is alive and still holds its .live
  | 'refresh' // this process holds the live generation for this owner
  | 'held' // unexpired, and its holder (here, or another live process) keeps it; or others wait in line
  | 'crashed'; // unexpired, but nobody holds its .live

type TakeoverReason = Extract<LeaseState, 'free' | 'released' | 'expired' | 'crashed'>;

/** A transition as the Lease runs it. `closeAfterUnlock`: a released generation's liveness lock,
 * closed once the transition lock is let go (see #transition). */
interface LeaseTransition extends TransitionContext {
  closeAfterUnlock: number | undefined;
}

/** The operations that run under the transition lock. */
interface TransitionRequest {
  /** An acquire fails closed on a predecessor that still will not close (see #retryPending). */
  readonly operation: 'acquire' | 'renew' | 'release';
  readonly sessionId: string;
  readonly signal: AbortSignal | undefined;
  /** `performance.now()` by which the transition lock must be ours; default transitionTimeoutMs. */
  readonly deadline?: number | undefined;
  /** A waiting acquire's place in the line. */
  readonly place?: Place | undefined;
}

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
  readonly #line: WaitLine;
  readonly #paths: DirPaths;
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
    this.#paths = new DirPaths(this.dir);
    this.#line = new WaitLine({
      io: this.#io,
      paths: this.#paths,
      ttlMs: this.ttlMs,
      closeOrDefer: (safe, fd) => this.#closeOrDefer(safe, fd),
    });
  }

  /**
   * Acquires the lease for `owner`, or throws LeaseHeldError. With `waitMs`, waits (in arrival
   * order with other waiters) for the holder to release, die or expire.
   */
  acquire(sessionId: string, owner: string, options?: AcquireOptions): Promise<LeaseGrant> {
    // Not an async function: returning the waiting acquire's promise from one would cost the
    // woken waiter two more promise hops before its caller has the grant.
    let signal: AbortSignal | undefined;
    let waitMs: number;
    try {
      checkSessionId(sessionId);
      checkOwner(owner);
      signal = operationSignal(options);
      waitMs = resolveWaitMs(options?.waitMs);
    } catch (error) {
      return Promise.reject(error);
    }
    if (waitMs > 0) return this.#acquireWaiting(sessionId, owner, waitMs, signal);
    return this.#acquireOnce(sessionId, owner, signal);
  }

  async #acquireOnce(sessionId: string, owner: string, signal: AbortSignal | undefined): Promise<LeaseGrant> {
    const request = { operation: 'acquire', sessionId, signal } as const;
    const attempt = await this.#transition(request, (tx) => this.#attempt(tx, owner));
    if ('grant' in attempt) return attempt.grant;
    throw attempt.refusal();
  }

  async renew(grant: LeaseGrant, options?: OperationOptions): Promise<LeaseGrant> {
    checkGrant(grant);
    const { sessionId, owner, token } = grant;
    const signal = operationSignal(options);
    return this.#transition({ operation: 'renew', sessionId, signal }, async ({ safe, now }) => {
      const expiryMs = now + this.ttlMs;
      checkExpiry(expiryMs);
      const held = this.#held.get(safe);
      // No handle here: a prior renew declared loss, or this grant was never this process's.
      if (held?.token !== token || held.owner !== owner) {
        publish(channels.loss, () => ({ lease: this, sessionId, owner, token }));
        throw new LeaseHeldError(
          `lease ${JSON.stringify(sessionId)} is not held by ${owner} with token ${token} in this process`,
          sessionId,
        );
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
      if (isExpired(record, now)) {
        publish(channels.reclaim, () => ({ lease: this, grant: renewed, expiredAt: new Date(record.expiryMs) }));
      } else publish(channels.renew, () => ({ lease: this, grant: renewed }));
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
    await this.#transition({ operation: 'release', sessionId, signal }, async (tx) => {
      const held = this.#held.get(safe);
      if (held?.token !== token || held.owner !== owner) return;
      try {
        const oneStep = this.#handOffInOneStep(tx, owner, token);
        if (oneStep === undefined) {
          const record = this.#readRecord(safe);
          if (record?.owner !== owner || record.token !== token) {
            // A successor owns the record: let go of our handle, touch nothing of theirs.
            this.#dropGeneration(safe, held);
            return;
          }
        } else if (oneStep === 'front gone') this.#line.handedOff(tx); // as #handOff: the next one
        if (oneStep !== 'handed') {
          const ourLive = this.#livePath(safe, token);
          const handOff = this.#line.nextInLine(tx, token);
          if (handOff === undefined) await this.#commitTombstone(tx, token, ourLive);
          else await this.#handOff(tx, token, ourLive, handOff);
        }
      } catch (error) {
        // Record replaced but not durable (directory fsync failed): released all the same.
        if ((error as CommitError).committed) this.#dropGeneration(safe, held);
        throw error;
      }
      this.#held.delete(safe);
      tx.closeAfterUnlock = held.fd; // its close wakes the waiter: after the transition lock
      publish(channels.release, () => ({ lease: this, grant }));
    });
    this.#wake(safe);
  }

  /**
   * A release's common case, the record ours and a live waiter in front of the line, as one step
   * of the I/O layer (see LeaseIO.releaseHandOff): what #handOff does, without this process's
   * JavaScript in between, which a contending process runs cold. `undefined` when the layer did
   * not take it (the steps below decide: a release to nobody among them, whose empty queue the
   * layer read first); `'front gone'` when the front waiter had just given up.
   */
  #handOffInOneStep(tx: TransitionContext, owner: string, token: bigint): 'handed' | 'front gone' | undefined {
    if (this.#io.releaseHandOff === undefined) return undefined;
    const { safe, sessionId, lockFd, now } = tx;
    const { record, prefix } = this.#paths.of(safe);
    const { before, between, after } = recordLayout(owner, sessionId);
    const outcome = this.#io.releaseHandOff(this.dir, {
      lockFd,
      record,
      prefix,
      liveSuffix: LIVE_SUFFIX,
      waitSuffix: WAIT_SUFFIX,
      before,
      between,
      after,
      token,
      nowMs: now,
    });
    switch (outcome) {
      case undefined:
      case 'front gone':
        return outcome;
      case 'queue empty':
        this.#line.readBy(tx, ''); // a release to nobody: its queue was read just now
        return undefined;
    }
    this.#retryRemovals(safe, outcome.removalErrors);
    return 'handed';
  }

  /** Releases to nobody: the record becomes a tombstone, and our .live goes. */
  #commitTombstone(tx: TransitionContext, token: bigint, ourLive: string): Promise<CommitResult> {
    const { safe, sessionId, now } = tx;
    return this.#commit(safe, { owner: '', token, expiryMs: now, session: sessionId }, { remove: [ourLive] });
  }

  /**
   * Hands the lease straight to the front waiter: its flocked .wait file becomes the new
   * generation's .live (a rename keeps the inode and so the flock), the record names it. A waiter
   * that gave up meanwhile passes it to the next in line, and an empty line to a tombstone.
   */
  async #handOff(tx: TransitionContext, token: bigint, ourLive: string, first: HandOff): Promise<void> {
    const { safe, sessionId, now } = tx;
    for (let handOff: HandOff | undefined = first; ; handOff = this.#line.nextInLine(tx, token)) {
      if (handOff === undefined) {
        await this.#commitTombstone(tx, token, ourLive);
        return;
      }
      const { waiter, next } = handOff;
      const live = this.#livePath(safe, next);
      const adoptFrom = this.#line.waitPath(safe, waiter.ticket);
      try {
        // No turn split (yieldIfRunStarts): the waiter, and the transition lock held here, would
        // wait for this loop's every ready callback; a hand-off goes straight on.
        await this.#commit(
          safe,
          { owner: waiter.owner, token: next, expiryMs: now + waiter.ttlMs, session: sessionId },
          { live, adoptFrom, remove: [ourLive] },
          false,
        );
      } catch (error) {
        const failure = error as CommitError;
        // The waiter gave up just now (it removes its .wait file without our lock): nothing
        // changed, so hand to the next one in line instead.
        if (failure.committed || failure.code !== 'ENOENT' || failure.path !== adoptFrom) throw error;
        this.#line.handedOff(tx);
        continue;
      }
      this.#line.handedOff(tx);
      return;
    }
  }

  /**
   * Acquires and keeps renewing (about every ttlMs/3) until released or lost; `hold.signal`
   * aborts on loss. `await using hold = await lease.hold(id, owner)` releases at scope end.
   */
  async hold(sessionId: string, owner: string, options?: HoldOptions): Promise<LeaseHold> {
    checkOptions(options, 'options');
    return holdLease(this, sessionId, owner, { clock: this.#clock, ...options });
  }

  /** One try: the grant, or the refusal and what to wait for. Runs under the transition lock. */
  async #attempt(tx: TransitionContext, owner: string): Promise<Attempt> {
    const { safe, sessionId, now } = tx;
    const expiryMs = now + this.ttlMs;
    checkExpiry(expiryMs);
    // A waiting acquire's first try behind others joins them whatever the record says (see
    // WaitLine.othersInLine), so it does not read it; unless this process holds the id, whose owner
    // may refresh it.
    if (!this.#held.has(safe)) {
      const queued = this.#line.joinBehindOthers(tx, () => this.#inLineError(sessionId, safe));
      if (queued !== undefined) return queued;
    }
    const record = this.#readRecord(safe);
    const state = this.#stateOf(tx, owner, record);
    switch (state) {
      case 'handed-over': {
        this.#adopt(safe, tx.place!, owner, record!.token);
        if (!isExpired(record!, now))
          return { grant: this.#handedOver(sessionId, owner, record!.token, record!.expiryMs) };
        // Woken too late to find it fresh: nobody took it meanwhile, so keep it as a renew would.
        await this.#commit(safe, { owner, token: record!.token, expiryMs, session: sessionId });
        return { grant: this.#handedOver(sessionId, owner, record!.token, expiryMs) };
      }
      case 'refresh': {
        await this.#commit(safe, { owner, token: record!.token, expiryMs, session: sessionId });
        const grant = grantOf(sessionId, owner, record!.token, expiryMs);
        publish(channels.acquire, () => ({ lease: this, grant, refreshed: true }));
        return { grant };
      }
      case 'held':
        return this.#line.refuse(
          tx,
          () => heldError(sessionId, record!),
          this.#livePath(safe, record!.token),
          expiresAtMs(record!),
        );
      case 'free':
      case 'released':
      case 'expired':
      case 'crashed': {
        // Takeable. Queued waiters go first, in arrival order.
        const refused = this.#line.claim(tx, record);
        if (refused !== undefined) return refused;
        return { grant: await this.#takeOver(tx, owner, record, expiryMs, state) };
      }
    }
  }

  /** The refusal of a waiting acquire that gave up in line behind others: the record is read only
   * now, to name the holder, and a failure to read it changes only what the error says. */
  #inLineError(sessionId: string, safe: string): LeaseHeldError {
    let record: LeaseRecord | undefined;
    try {
      record = this.#readRecord(safe);
    } catch {
      // unreadable now: the error names no holder
    }
    if (record !== undefined && record.owner !== '' && !isExpired(record, readClock(this.#clock)))
      return heldError(sessionId, record);
    return new LeaseHeldError(
      `lease ${JSON.stringify(sessionId)} is reserved for the waiters queued ahead`,
      sessionId,
      record && holderOf(record),
    );
  }

  /** What an acquire by `owner` finds under the transition lock. */
  #stateOf(tx: TransitionContext, owner: string, record: LeaseRecord | undefined): LeaseState {
    if (record === undefined) return 'free';
    if (this.#handedTo(tx.safe, tx.place, owner, record)) return 'handed-over';
    if (record.owner === '') return 'released';
    if (isExpired(record, tx.now)) return 'expired';
    // This process holds the live generation: only its own owner may refresh it.
    if (this.#held.get(tx.safe)?.token === record.token) return record.owner === owner ? 'refresh' : 'held';
    // Unexpired and not ours (same owner without the local handle gets no favour). A waiting
    // acquire's first try with others in line queues behind them either way, so it does not ask:
    // the probe's close would wake the waiter watching that .live for nothing, under this lock.
    if (this.#line.othersInLine(tx)) return 'held';
    return this.#io.probeLive(this.#livePath(tx.safe, record.token)) ? 'held' : 'crashed';
  }

  /** Whether a release handed `record`'s generation to this waiting `place`: its owner, and our
   * flocked .wait file renamed to its .live. (The watch's probe asks the same: see HandOffProbe.) */
  #handedTo(safe: string, place: Place | undefined, owner: string, record: LeaseRecord): boolean {
    const fd = place?.fd;
    return fd !== undefined && record.owner === owner && this.#io.sameFile(fd, this.#livePath(safe, record.token));
  }

  /** A release handed us the lease while we waited (under the transition lock, or see
   * #adoptHandOff): our .wait file is its .live, now held as ours. */
  #adopt(safe: string, place: Place, owner: string, token: bigint): void {
    const predecessor = this.#held.get(safe);
    if (predecessor !== undefined) this.#dropGeneration(safe, predecessor);
    this.#held.set(safe, { token, owner, fd: place.fd! });
    place.fd = undefined;
    place.ticket = undefined;
  }

  /** The grant of an adopted hand-off, announced. */
  #handedOver(sessionId: string, owner: string, token: bigint, expiryMs: number): LeaseGrant {
    const grant = grantOf(sessionId, owner, token, expiryMs);
    publish(channels.acquire, () => ({ lease: this, grant, refreshed: false }));
    publish(channels.takeover, () => ({ lease: this, grant, reason: 'handoff' as const }));
    return grant;
  }

  /** A waiting acquire. Its promise is resolved by whichever comes first: the loop, or (one promise
   * hop sooner: the woken waiter's path to its grant) a hand-off taken in the watch's report. */
  #acquireWaiting(
    sessionId: string,
    owner: string,
    waitMs: number,
    signal: AbortSignal | undefined,
  ): Promise<LeaseGrant> {
    return new Promise((resolve, reject) => {
      this.#waitInLine(sessionId, owner, waitMs, signal, resolve).then(resolve, reject);
    });
  }

  async #waitInLine(
    sessionId: string,
    owner: string,
    waitMs: number,
    signal: AbortSignal | undefined,
    handedOver: (grant: LeaseGrant) => void,
  ): Promise<LeaseGrant> {
    const deadline = performance.now() + waitMs;
    const safe = safeID(sessionId);
    const place: Place = { owner };
    try {
      for (let idleRounds = 0, lastWatch: string | undefined; ;) {
        const attempt = await this.#transition({ operation: 'acquire', sessionId, signal, deadline, place }, (tx) =>
          this.#attempt(tx, owner),
        );
        if ('grant' in attempt) return attempt.grant;
        // Rounds that end at once on the same watch saw no change: pause a little so we never spin.
        if (idleRounds > 2) await sleep(Math.min(2 ** idleRounds, 50), signal);
        const left = deadline - performance.now();
        if (left <= 0) throw attempt.refusal();
        const started = performance.now();
        const handOff = this.#handOffWatch(sessionId, safe, place, handedOver);
        const taken = await this.#waitForChange(safe, attempt, left, signal, handOff);
        if (taken === undefined) {
          const adopted = this.#adoptHandOff(sessionId, safe, owner, place);
          if (adopted !== undefined) return adopted;
        } else if (taken !== NO_HAND_OFF) return taken;
        idleRounds = performance.now() - started < 1 && attempt.watch === lastWatch ? idleRounds + 1 : 0;
        lastWatch = attempt.watch;
      }
    } finally {
      if (this.#wakers.get(safe)?.size === 0) this.#wakers.delete(safe);
      if (place.fd !== undefined) {
        this.#line.leave(safe, place);
        this.#wake(safe); // whoever queued behind us may be first now
      }
    }
  }

  /** What the watch of a queued `place` asks in its report (see HandOffProbe), and how a hand-off it
   * finds is taken there and then; `undefined` for a waiter with no place in the line. Made for a
   * round that is about to sleep: an acquire that gets the lease at once never builds it. */
  #handOffWatch(
    sessionId: string,
    safe: string,
    place: Place,
    handedOver: (grant: LeaseGrant) => void,
  ): HandOffWatch<LeaseGrant> | undefined {
    const { fd, owner } = place;
    if (fd === undefined) return undefined;
    const paths = this.#paths.of(safe);
    const { before, between, after } = recordLayout(owner, sessionId); // the hand-off record a release writes for us
    const probe: HandOffProbe = {
      record: paths.record,
      fd,
      livePrefix: paths.prefix,
      liveSuffix: LIVE_SUFFIX,
      before,
      between,
      after,
    };
    return {
      probe,
      take: (token, expiry) => {
        // Still the place the probe asked about (the addon checked this fd's inode).
        const instant = place.fd === fd ? parseRfc3339Instant(expiry) : undefined;
        if (instant === undefined) return undefined;
        const { ms: expiryMs, nanos } = instant;
        const record = { owner, token, expiryMs, expiryNanos: nanos || undefined, session: sessionId };
        const grant = this.#adoptHandOff(sessionId, safe, owner, place, record);
        if (grant !== undefined) handedOver(grant);
        return grant;
      },
    };
  }

  /**
   * The fast path after a wake-up: if a release handed us the lease, take it without the transition
   * lock — the record is replaced atomically, and our own flock on the handed-over file is what
   * keeps everyone else off an unexpired lease. Synchronous, since it is the woken waiter's path to
   * its grant. `reported`: the record the watch's probe found at its report, a hand-off to us
   * (see HandOffProbe), checked here instead of reading again.
   * Expired, another operation of this process on the id under way, or anything else: `undefined`,
   * and the locked path decides.
   */
  #adoptHandOff(
    sessionId: string,
    safe: string,
    owner: string,
    place: Place,
    reported?: LeaseRecord,
  ): LeaseGrant | undefined {
    // Synchronous from here: the gate needs only to be free.
    if (place.fd === undefined || !this.#gate.isFree(safe)) return undefined;
    const record = reported ?? this.#readRecord(safe);
    const now = readClock(this.#clock);
    if (record === undefined || isExpired(record, now)) return undefined;
    if (reported === undefined && !this.#handedTo(safe, place, owner, record)) return undefined;
    this.#adopt(safe, place, owner, record.token);
    return this.#handedOver(sessionId, owner, record.token, record.expiryMs);
  }

  /** Sleeps until the holder (or the waiter ahead) lets go, `until` passes, this process changes
   * the lease, the wait runs out, or `signal` aborts (which rejects); resolves with the grant of a
   * hand-off taken in the watch's report, or NO_HAND_OFF when its probe found none. The waiting
   * acquire drops the id's emptied wakers set when it ends. */
  #waitForChange(
    safe: string,
    attempt: Refused,
    leftMs: number,
    signal: AbortSignal | undefined,
    handOff: HandOffWatch<LeaseGrant> | undefined,
  ): Promise<LeaseGrant | typeof NO_HAND_OFF | undefined> {
    let wakers = this.#wakers.get(safe);
    if (wakers === undefined) this.#wakers.set(safe, (wakers = new Set()));
    const untilMs = attempt.until === undefined ? Infinity : Math.max(0, attempt.until - readClock(this.#clock)) + 1;
    const ms = Math.min(leftMs, untilMs);
    return waitForUnlock(this.#io, attempt.watch, ms, signal, wakers, handOff, attempt.watchMode);
  }

  /** Wakes this process's waiting acquires on `safe` to look again. */
  #wake(safe: string): void {
    const wakers = this.#wakers.get(safe);
    if (wakers !== undefined) for (const wake of wakers) wake();
  }

  /** Runs `body` with the id's in-process gate and cross-process transition lock held. */
  async #transition<T>(request: TransitionRequest, body: (tx: LeaseTransition) => Promise<T>): Promise<T> {
    const { sessionId, signal } = request;
    signal?.throwIfAborted();
    const safe = safeID(sessionId);
    const leave = this.#gate.tryEnter(safe) ?? (await this.#gate.enter(safe, signal));
    try {
      const path = this.#paths.of(safe).lock;
      // Free in the common case: take it without the waiting machinery.
      const first = this.#tryLockTransition(path);
      const lockFd =
        typeof first === 'number'
          ? first
          : await lockTransition({
              io: this.#io,
              path,
              sessionId,
              deadline: request.deadline ?? performance.now() + this.transitionTimeoutMs,
              signal,
              tryLock: (p) => this.#tryLockTransition(p),
              firstTry: first,
            });
      let tx: LeaseTransition | undefined;
      try {
        this.#retryPending(safe, request.operation === 'acquire');
        // Every field from the start: one shape, and no property store added when the body sets one.
        tx = {
          sessionId,
          safe,
          now: readClock(this.#clock),
          lockFd,
          place: request.place,
          queue: undefined,
          closeAfterUnlock: undefined,
        };
        return await body(tx);
      } finally {
        try {
          this.#io.unlockTransition(lockFd);
        } finally {
          // Only now: this close wakes whoever watches that generation (the waiter a release handed
          // the lease to), which would otherwise find the transition lock still ours.
          if (tx?.closeAfterUnlock !== undefined) this.#closeOrDefer(safe, tx.closeAfterUnlock);
        }
      }
    } finally {
      leave();
      const turn = yieldIfStarving(); // on tmpfs nothing above touched the event loop
      if (turn !== undefined) await turn;
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

  /** Takes over: new token, new liveness lock, then the record (the commit point). A queued
   * waiter's liveness lock is its own flocked `.wait` file, renamed to the new `.live` (as a
   * hand-off does): a rename costs less than creating and flocking a file, and leaving the line. */
  async #takeOver(
    tx: TransitionContext,
    owner: string,
    record: LeaseRecord | undefined,
    expiryMs: number,
    reason: TakeoverReason,
  ): Promise<LeaseGrant> {
    const { safe, sessionId, now } = tx;
    const token = nextToken(record?.token ?? 0n, now);
    if (token === undefined) {
      throw new LeaseTokenExhaustedError(
        `lease ${JSON.stringify(sessionId)} has used every uint64 fencing token`,
        sessionId,
      );
    }
    const predecessor = this.#held.get(safe);
    if (predecessor !== undefined) {
      // Fail closed: never hold two generations of one id. If this close throws, nothing changed.
      this.#io.closeFile(predecessor.fd);
      this.#held.delete(safe);
    }
    const live = this.#livePath(safe, token);
    const remove = record === undefined ? [] : [this.#livePath(safe, record.token)];
    const { place } = tx;
    const adoptFrom = place?.fd === undefined ? undefined : this.#line.waitPath(safe, place.ticket!);
    try {
      const { liveFd } = await this.#commit(
        safe,
        { owner, token, expiryMs, session: sessionId },
        { live, adoptFrom, remove },
      );
      this.#holdTaken(safe, owner, token, adoptFrom === undefined ? liveFd : place);
    } catch (error) {
      const failure = error as CommitError;
      if (!failure.committed && failure.code === 'ENOENT' && adoptFrom !== undefined && failure.path === adoptFrom) {
        // A releaser that died mid-hand-off renamed our .wait away (to a .live no record names):
        // nothing changed; leave the line and take over as an unqueued acquire does.
        this.#line.leave(safe, place);
        return this.#takeOver(tx, owner, record, expiryMs, reason);
      }
      if (failure.committed) {
        // The record names us (only its directory fsync failed): hold the generation, finish cleanup later.
        this.#holdTaken(safe, owner, token, adoptFrom === undefined ? failure.liveFd : place);
        for (const path of remove) this.#pendingFor(safe).removals.add(path);
      }
      // A process that wrote no record holds a token this new: treat it as a live competitor.
      if (failure.syscall === 'flock' && failure.code === 'EAGAIN') {
        throw new LeaseHeldError(`lease ${JSON.stringify(sessionId)}: ${live} is locked by another process`, sessionId);
      }
      // Before the commit point the addon has undone the new generation (an adopted .wait is renamed
      // back, and the waiting acquire leaves the line as it ends): the old record stands.
      throw error;
    }
    const grant = grantOf(sessionId, owner, token, expiryMs);
    publish(channels.acquire, () => ({ lease: this, grant, refreshed: false }));
    if (record !== undefined && reason !== 'free') {
      publish(channels.takeover, () => ({ lease: this, grant, reason, previous: holderOf(record) }));
    }
    this.#wake(safe); // local waiters now wait on the new holder
    return grant;
  }

  /** Holds a committed takeover's generation: the `.live` it created, or the waiting place whose
   * `.wait` it renamed to the `.live`. */
  #holdTaken(safe: string, owner: string, token: bigint, live: number | Place | undefined): void {
    if (typeof live === 'object') this.#adopt(safe, live, owner, token);
    else if (live !== undefined) this.#held.set(safe, { token, owner, fd: live });
  }

  #holds(safe: string, owner: string, token: bigint): boolean {
    const held = this.#held.get(safe);
    return held?.token === token && held.owner === owner;
  }

  #readRecord(safe: string): LeaseRecord | undefined {
    return readRecordAt(this.#io, this.#paths.of(safe).record);
  }

  #livePath(safe: string, token: bigint): string {
    return this.#paths.live(safe, token);
  }

  /** Writes the record (and whatever else the plan says) as one step; defers failed removals.
   * `splitTurn`: false for a commit a waiter in line is waiting on (see #handOff). */
  async #commit(
    safe: string,
    record: LeaseRecord,
    plan?: Omit<CommitPlan, 'record' | 'data'>,
    splitTurn = true,
  ): Promise<CommitResult> {
    const turn = splitTurn ? yieldIfRunStarts() : undefined;
    if (turn !== undefined) await turn;
    // Named fields, not `{ ...plan, record, data }`: V8 builds a spread followed by more fields on
    // a slow path, measured at ~2 µs here, twice a cycle.
    const result = await this.#io.commit(this.dir, {
      record: this.#paths.of(safe).record,
      data: formatRecord(record),
      live: plan?.live,
      adoptFrom: plan?.adoptFrom,
      remove: plan?.remove,
    });
    this.#retryRemovals(safe, result.removalErrors);
    return result;
  }

  /** Keeps the files a commit could not remove, for the id's next operation to remove. */
  #retryRemovals(safe: string, failures: readonly NodeJS.ErrnoException[]): void {
    for (const failure of failures) {
      if (failure.path !== undefined) this.#pendingFor(safe).removals.add(failure.path);
    }
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

function operationSignal(options: OperationOptions | undefined): AbortSignal | undefined {
  checkOptions(options, 'options');
  checkSignal(options?.signal);
  return options?.signal;
}

function grantOf(sessionId: string, owner: string, token: bigint, expiryMs: number): LeaseGrant {
  return Object.freeze({ sessionId, owner, token, expiry: new Date(expiryMs) });
}

function describe(record: LeaseRecord): string {
  return record.owner === ''
    ? `it was released (token ${record.token})`
    : `${record.owner} holds it with token ${record.token} until ${new Date(record.expiryMs).toISOString()}`;
}

function heldError(sessionId: string, record: LeaseRecord): LeaseHeldError {
  return new LeaseHeldError(
    `lease ${JSON.stringify(sessionId)} is held: ${describe(record)}`,
    sessionId,
    holderOf(record),
  );
}
