/**
 * The single-host session lease over a lease directory (port of the Go original).
 *
 * A stable `<safeID>.lock` flock serializes record transitions only; each lease generation keeps
 * its own `<safeID>.<token>.live` flock for its whole life, so the kernel tells everyone the moment
 * a holder dies; `<safeID>.lease.json` records owner, token and expiry. See README "How it works".
 *
 * The Lease runs each operation as one transition and delegates: what an acquire finds is
 * acquireState's (a pure decision), the generations it holds are Generations', a release's
 * hand-off and its waiter's taking of it are HandOffs', the waiting loop is WaitingAcquires', and
 * the wait line is WaitLine's.
 */
import { resolve } from 'node:path';
import { LeaseHeldError, LeaseTokenExhaustedError } from '../port/errors.js';
import { publish } from '../kernel/events.js';
import { channels } from '../port/events.js';
import { holdLease, type HoldOptions, type LeaseHold } from '../port/hold.js';
import { nextToken } from '../kernel/token.js';
import { yieldIfStarving } from '../port/turn.js';
import type { AcquireOptions, LeaseGrant, LeaseOptions, OperationOptions, SessionLease } from '../port/types.js';
import {
  checkExpiry,
  checkGrant,
  checkOptions,
  checkOwner,
  checkPositiveMs,
  checkSessionId,
  operationSignal,
  readClock,
  resolveLeaseOptions,
  resolveWaitMs,
} from '../port/validate.js';
import { acquireState, type TakeoverReason } from './acquire-state.js';
import { KeyedGate } from './gate.js';
import { Generations } from './generations.js';
import { HandOffs } from './handoff.js';
import { fileIO, type CommitError, type LeaseIO } from './io.js';
import { DirPaths, safeID } from './layout.js';
import { expiresAtMs, grantOf, holderOf, isExpired, type LeaseRecord } from './record.js';
import { lockTransition, readRecordAt, type TransitionContext } from './transition.js';
import type { Place } from './queue.js';
import { WaitLine } from './waitline.js';
import { WaitingAcquires, type Attempt } from './waiting.js';

export interface FileLeaseOptions extends LeaseOptions {
  /** How long an operation waits for another process's transition (one operation, normally
   * microseconds) before failing with LeaseTimeoutError. Default: min(ttlMs, 10 000). */
  readonly transitionTimeoutMs?: number | undefined;
}

/** Internal: the I/O layer to use (tests inject faults through it). Not part of the public API. */
export const kIO = Symbol('flocklease.io');

/** A transition as the Lease runs it. `closeAfterUnlock`: a released generation's liveness lock,
 * closed once the transition lock is let go (see #transition). */
interface LeaseTransition extends TransitionContext {
  closeAfterUnlock: number | undefined;
}

/** The operations that run under the transition lock. */
interface TransitionRequest {
  /** An acquire fails closed on a predecessor that still will not close (see Generations.retryPending). */
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
  readonly #paths: DirPaths;
  readonly #generations: Generations;
  readonly #line: WaitLine;
  readonly #handOffs: HandOffs;
  readonly #waiting: WaitingAcquires;
  #dirReady = false;

  constructor(dir: string, options: FileLeaseOptions = {}) {
    if (typeof dir !== 'string' || dir === '') throw new TypeError('dir must be a non-empty string');
    ({ clock: this.#clock, ttlMs: this.ttlMs } = resolveLeaseOptions(options));
    checkPositiveMs(options.transitionTimeoutMs, 'transitionTimeoutMs');
    this.transitionTimeoutMs = options.transitionTimeoutMs ?? Math.min(this.ttlMs, 10_000);
    this.dir = resolve(dir);
    this.#io = (options as { [kIO]?: LeaseIO })[kIO] ?? fileIO;
    this.#paths = new DirPaths(this.dir);
    const generations = (this.#generations = new Generations(this.#io, this.dir, this.#paths));
    this.#line = new WaitLine({
      io: this.#io,
      paths: this.#paths,
      ttlMs: this.ttlMs,
      closeOrDefer: (safe, fd) => generations.closeOrDefer(safe, fd),
    });
    this.#handOffs = new HandOffs({ lease: this, generations, line: this.#line, paths: this.#paths });
    this.#waiting = new WaitingAcquires({ io: this.#io, clock: this.#clock, line: this.#line });
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
    if (waitMs > 0) {
      return this.#waiting.acquire(sessionId, owner, waitMs, signal, (place, deadline) =>
        this.#transition({ operation: 'acquire', sessionId, signal, deadline, place }, (tx) =>
          this.#attempt(tx, owner),
        ),
      );
    }
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
      const held = this.#generations.get(safe);
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
        this.#generations.drop(safe, held);
        const holder = record && holderOf(record);
        publish(channels.loss, () => ({ lease: this, sessionId, owner, token, holder }));
        throw new LeaseHeldError(
          `lease ${JSON.stringify(sessionId)} was lost: ${record === undefined ? 'its record is gone' : describe(record)}`,
          sessionId,
          holder,
        );
      }
      // Still ours, even if it had expired: nobody took it over meanwhile (the sleep-past-TTL reclaim).
      await this.#generations.commit(safe, { owner, token, expiryMs, session: sessionId });
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
    const generations = this.#generations;
    // Unknown, stale or already released, and nothing to retry: a no-op that needs no lock.
    if (!generations.holds(safe, owner, token) && !generations.hasPending(safe) && this.#gate.size === 0) return;
    await this.#transition({ operation: 'release', sessionId, signal }, async (tx) => {
      const held = generations.get(safe);
      if (held?.token !== token || held.owner !== owner) return;
      try {
        const record = this.#readRecord(safe);
        if (record?.owner !== owner || record.token !== token) {
          // A successor owns the record: let go of our handle, touch nothing of theirs.
          generations.drop(safe, held);
          return;
        }
        await this.#handOffs.give(tx, token);
      } catch (error) {
        // Record replaced but not durable (directory fsync failed): released all the same.
        if ((error as CommitError).committed) generations.drop(safe, held);
        throw error;
      }
      generations.forget(safe);
      tx.closeAfterUnlock = held.fd; // its close wakes the waiter: after the transition lock
      publish(channels.release, () => ({ lease: this, grant }));
    });
    this.#waiting.wake(safe);
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
    const { safe, sessionId, now, place } = tx;
    const expiryMs = now + this.ttlMs;
    checkExpiry(expiryMs);
    const held = this.#generations.get(safe);
    // A waiting acquire's first try behind others joins them whatever the record says (see
    // WaitLine.othersInLine), so it does not read it; unless this process holds the id, whose owner
    // may refresh it.
    if (held === undefined) {
      const queued = this.#line.joinBehindOthers(tx, () => this.#inLineError(sessionId, safe));
      if (queued !== undefined) return queued;
    }
    const record = this.#readRecord(safe);
    const state = acquireState(record, owner, now, {
      handedToUs: (r) => place?.fd !== undefined && this.#io.sameFile(place.fd, this.#paths.live(safe, r.token)),
      heldToken: held?.token,
      othersInLine: () => this.#line.othersInLine(tx),
      holderAlive: (token) => this.#io.probeLive(this.#paths.live(safe, token)),
    });
    switch (state) {
      case 'handed-over':
        return { grant: await this.#handOffs.take(tx, owner, record!, expiryMs) };
      case 'refresh': {
        await this.#generations.commit(safe, { owner, token: record!.token, expiryMs, session: sessionId });
        const grant = grantOf(sessionId, owner, record!.token, expiryMs);
        publish(channels.acquire, () => ({ lease: this, grant, refreshed: true }));
        return { grant };
      }
      case 'held':
        return this.#line.refuse(
          tx,
          () => heldError(sessionId, record!),
          this.#paths.live(safe, record!.token),
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
        this.#generations.retryPending(safe, request.operation === 'acquire');
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
          if (tx?.closeAfterUnlock !== undefined) this.#generations.closeOrDefer(safe, tx.closeAfterUnlock);
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
    const { safe, sessionId, now, place } = tx;
    const token = nextToken(record?.token ?? 0n, now);
    if (token === undefined) {
      throw new LeaseTokenExhaustedError(
        `lease ${JSON.stringify(sessionId)} has used every uint64 fencing token`,
        sessionId,
      );
    }
    this.#generations.closeBeforeTakeover(safe);
    const live = this.#paths.live(safe, token);
    const remove = record === undefined ? [] : [this.#paths.live(safe, record.token)];
    const adoptFrom = place?.fd === undefined ? undefined : this.#line.waitPath(safe, place.ticket!);
    try {
      const plan = { live, adoptFrom, remove };
      const { liveFd } = await this.#generations.commit(safe, { owner, token, expiryMs, session: sessionId }, plan);
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
        this.#generations.removeLater(safe, remove);
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
    this.#waiting.wake(safe); // local waiters now wait on the new holder
    return grant;
  }

  /** Holds a committed takeover's generation: the `.live` it created, or the waiting place whose
   * `.wait` it renamed to the `.live`. */
  #holdTaken(safe: string, owner: string, token: bigint, live: number | Place | undefined): void {
    if (typeof live === 'object') this.#generations.adopt(safe, live, owner, token);
    else if (live !== undefined) this.#generations.hold(safe, owner, token, live);
  }

  #readRecord(safe: string): LeaseRecord | undefined {
    return readRecordAt(this.#io, this.#paths.of(safe).record);
  }
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
