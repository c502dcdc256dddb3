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
import { nextToken } from '../port/token.js';
import type { LeaseGrant, LeaseOptions, OperationOptions, SessionLease } from '../port/types.js';
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
} from '../port/validate.js';
import { sleep } from './abort.js';
import { KeyedGate } from './gate.js';
import { fileIO, type CommitError, type CommitPlan, type CommitResult, type LeaseIO } from './io.js';
import { liveName, lockName, recordName, safeID } from './layout.js';
import { formatRecord, parseRecord, RecordFormatError, type LeaseRecord } from './record.js';

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

type TakeoverReason = 'free' | 'released' | 'expired' | 'crashed';

const LOCK_RETRY_FIRST_MS = 0.25;
const LOCK_RETRY_MAX_MS = 20;

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

  async acquire(sessionId: string, owner: string, options?: OperationOptions): Promise<LeaseGrant> {
    checkSessionId(sessionId);
    checkOwner(owner);
    const signal = operationSignal(options);
    return this.#transition(sessionId, signal, true, async (safe, now) => {
      const expiryMs = now + this.ttlMs;
      checkExpiry(expiryMs);
      const record = this.#readRecord(safe);
      const held = this.#held.get(safe);
      let reason: TakeoverReason;
      if (record === undefined) reason = 'free';
      else if (record.owner === '') reason = 'released';
      // Expired: replaceable even if the old process is alive and still holds its .live.
      else if (record.expiryMs <= now) reason = 'expired';
      else if (held?.token === record.token) {
        // This process holds the live generation: only its own owner may refresh it.
        if (record.owner !== owner) throw heldError(sessionId, record);
        await this.#commit(safe, { owner, token: record.token, expiryMs, session: sessionId });
        const grant = grantOf(sessionId, owner, record.token, expiryMs);
        publish(channels.acquire, () => ({ lease: this, grant, refreshed: true }));
        return grant;
      }
      // Unexpired and not ours (same owner without the local handle gets no favour): ask the kernel.
      else if (this.#io.probeLive(join(this.dir, liveName(safe, record.token)))) throw heldError(sessionId, record);
      else reason = 'crashed';
      return this.#takeOver(safe, sessionId, owner, record, expiryMs, now, reason);
    });
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
      if (record.expiryMs <= now) publish(channels.reclaim, () => ({ lease: this, grant: renewed, expiredAt: new Date(record.expiryMs) }));
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
    await this.#transition(sessionId, signal, false, async (safe, now) => {
      const held = this.#held.get(safe);
      if (held?.token !== token || held.owner !== owner) return;
      const record = this.#readRecord(safe);
      if (record?.owner !== owner || record.token !== token) {
        // A successor owns the record: let go of our handle, touch nothing of theirs.
        this.#dropGeneration(safe, held);
        return;
      }
      try {
        await this.#commit(safe, { owner: '', token, expiryMs: now, session: sessionId }, { remove: [join(this.dir, liveName(safe, token))] });
      } catch (error) {
        // Tombstone in place but not durable (directory fsync failed): the lease is released all the same.
        if ((error as CommitError).committed) this.#dropGeneration(safe, held);
        throw error;
      }
      this.#dropGeneration(safe, held);
      publish(channels.release, () => ({ lease: this, grant }));
    });
  }

  /** Runs `body` with the id's in-process gate and cross-process transition lock held. */
  async #transition<T>(
    sessionId: string,
    signal: AbortSignal | undefined,
    failClosed: boolean,
    body: (safe: string, now: number) => Promise<T>,
  ): Promise<T> {
    signal?.throwIfAborted();
    const safe = safeID(sessionId);
    const leave = await this.#gate.enter(safe, signal);
    try {
      const lockFd = await this.#lockTransition(safe, sessionId, signal);
      try {
        this.#retryPending(safe, failClosed);
        return await body(safe, readClock(this.#clock));
      } finally {
        this.#io.unlockTransition(lockFd);
      }
    } finally {
      leave();
    }
  }

  async #lockTransition(safe: string, sessionId: string, signal: AbortSignal | undefined): Promise<number> {
    const path = join(this.dir, lockName(safe));
    const deadline = performance.now() + this.transitionTimeoutMs;
    for (let delay = LOCK_RETRY_FIRST_MS; ; ) {
      const fd = this.#tryLockTransition(path);
      if (typeof fd === 'number') return fd;
      if (fd === 'replaced') continue; // the lock file was pruned under us: lock the new one
      const left = deadline - performance.now();
      if (left <= 0) {
        throw new LeaseTimeoutError(
          `the transition lock ${path} was not free within ${this.transitionTimeoutMs} ms: another process is in (or stopped in) an operation on this id`,
          sessionId,
        );
      }
      await sleep(Math.min(delay, left), signal);
      delay = Math.min(delay * 2, LOCK_RETRY_MAX_MS);
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
