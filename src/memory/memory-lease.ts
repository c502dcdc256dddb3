/**
 * The in-process reference backend: the port's rules with nothing but a Map and a clock. For tests
 * (inject a fake clock) and for single-process programs. There are no processes to crash here, so
 * an unexpired holder is always live.
 */
import { LeaseHeldError, LeaseTokenExhaustedError, type LeaseHolder } from '../port/errors.js';
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
  checkSessionId,
  operationSignal,
  readClock,
  resolveLeaseOptions,
  resolveWaitMs,
} from '../port/validate.js';
import { sleep } from '../port/abort.js';

interface MemoryRecord {
  /** "" once released. */
  owner: string;
  token: bigint;
  expiryMs: number;
}

export class MemoryLease implements SessionLease {
  readonly ttlMs: number;
  readonly #clock: () => number;
  readonly #records = new Map<string, MemoryRecord>();
  /** sessionId → waiting acquires in arrival order; a free lease goes to the first. */
  readonly #queues = new Map<string, Array<() => void>>();

  constructor(options: LeaseOptions = {}) {
    ({ clock: this.#clock, ttlMs: this.ttlMs } = resolveLeaseOptions(options));
  }

  async acquire(sessionId: string, owner: string, options?: AcquireOptions): Promise<LeaseGrant> {
    checkSessionId(sessionId);
    checkOwner(owner);
    await checkOperation(options);
    const waitMs = resolveWaitMs(options?.waitMs);
    if (waitMs === 0) return this.#tryAcquire(sessionId, owner, false);
    // Wait in line: woken by a release here, or at the holder's expiry, until waitMs runs out.
    const deadline = performance.now() + waitMs;
    const queue = this.#queues.get(sessionId) ?? [];
    this.#queues.set(sessionId, queue);
    let wake!: () => void;
    let woken = new Promise<void>((resolve) => (wake = resolve));
    const me = (): void => wake();
    queue.push(me);
    const signal = options?.signal;
    const onAbort = (): void => wake(); // the loop then throws the reason
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      for (;;) {
        try {
          return this.#tryAcquire(sessionId, owner, queue[0] === me);
        } catch (error) {
          if (!(error instanceof LeaseHeldError)) throw error;
          const left = deadline - performance.now();
          if (left <= 0) throw error;
          const record = this.#records.get(sessionId);
          const untilExpiry =
            record === undefined || record.owner === '' ? left : record.expiryMs - readClock(this.#clock) + 1;
          const round = new AbortController();
          try {
            await Promise.race([woken, sleep(Math.max(1, Math.min(left, untilExpiry)), round.signal).catch(() => {})]);
          } finally {
            round.abort();
          }
          signal?.throwIfAborted();
          woken = new Promise<void>((resolve) => (wake = resolve));
        }
      }
    } finally {
      signal?.removeEventListener('abort', onAbort);
      queue.splice(queue.indexOf(me), 1);
      if (queue.length === 0) this.#queues.delete(sessionId);
      else queue[0]!(); // the next in line may go now
    }
  }

  /** Acquires and keeps renewing until released or lost (see Lease.hold). */
  async hold(sessionId: string, owner: string, options?: HoldOptions): Promise<LeaseHold> {
    checkOptions(options, 'options');
    return holdLease(this, sessionId, owner, { clock: this.#clock, ...options });
  }

  #tryAcquire(sessionId: string, owner: string, first: boolean): LeaseGrant {
    const now = readClock(this.#clock);
    const expiryMs = now + this.ttlMs;
    checkExpiry(expiryMs);
    const record = this.#records.get(sessionId);
    if (record !== undefined && record.owner !== '' && record.expiryMs > now) {
      if (record.owner !== owner) {
        throw new LeaseHeldError(
          `lease ${JSON.stringify(sessionId)} is held by ${record.owner}`,
          sessionId,
          holderOf(record),
        );
      }
      record.expiryMs = expiryMs; // same owner re-acquires: same token, fresh expiry
      const grant = grantOf(sessionId, record);
      publish(channels.acquire, () => ({ lease: this, grant, refreshed: true }));
      return grant;
    }
    if (!first && (this.#queues.get(sessionId)?.length ?? 0) > 0) {
      throw new LeaseHeldError(
        `lease ${JSON.stringify(sessionId)} is free but reserved for a queued waiter`,
        sessionId,
      );
    }
    const token = nextToken(record?.token ?? 0n, now);
    if (token === undefined) {
      throw new LeaseTokenExhaustedError(
        `lease ${JSON.stringify(sessionId)} has used every uint64 fencing token`,
        sessionId,
      );
    }
    const previous = record && holderOf(record);
    const next = { owner, token, expiryMs };
    this.#records.set(sessionId, next);
    const grant = grantOf(sessionId, next);
    publish(channels.acquire, () => ({ lease: this, grant, refreshed: false }));
    if (previous !== undefined) {
      const reason = previous.owner === '' ? 'released' : 'expired';
      publish(channels.takeover, () => ({ lease: this, grant, reason, previous }));
    }
    return grant;
  }

  async renew(grant: LeaseGrant, options?: OperationOptions): Promise<LeaseGrant> {
    checkGrant(grant);
    await checkOperation(options);
    const { sessionId, owner, token } = grant;
    const now = readClock(this.#clock);
    const expiryMs = now + this.ttlMs;
    checkExpiry(expiryMs);
    const record = this.#records.get(sessionId);
    if (record?.owner !== owner || record.token !== token) {
      const holder = record && holderOf(record);
      publish(channels.loss, () => ({ lease: this, sessionId, owner, token, holder }));
      throw new LeaseHeldError(
        `lease ${JSON.stringify(sessionId)} was lost by ${owner} (token ${token})`,
        sessionId,
        holder,
      );
    }
    const expiredAt = record.expiryMs;
    record.expiryMs = expiryMs; // even if it had expired: nobody took it over (sleep-past-TTL reclaim)
    const renewed = grantOf(sessionId, record);
    if (expiredAt <= now)
      publish(channels.reclaim, () => ({ lease: this, grant: renewed, expiredAt: new Date(expiredAt) }));
    else publish(channels.renew, () => ({ lease: this, grant: renewed }));
    return renewed;
  }

  async release(grant: LeaseGrant, options?: OperationOptions): Promise<void> {
    checkGrant(grant);
    await checkOperation(options);
    const record = this.#records.get(grant.sessionId);
    if (record?.owner !== grant.owner || record.token !== grant.token) return; // unknown or stale: no-op
    record.owner = '';
    record.expiryMs = readClock(this.#clock);
    publish(channels.release, () => ({ lease: this, grant }));
    this.#queues.get(grant.sessionId)?.[0]?.();
  }
}

async function checkOperation(options: OperationOptions | undefined): Promise<void> {
  operationSignal(options);
  await yieldIfStarving(); // every operation here is synchronous: never starve the caller's loop
  options?.signal?.throwIfAborted();
}

function grantOf(sessionId: string, record: MemoryRecord): LeaseGrant {
  return Object.freeze({ sessionId, owner: record.owner, token: record.token, expiry: new Date(record.expiryMs) });
}

function holderOf(record: MemoryRecord): LeaseHolder {
  return Object.freeze({ owner: record.owner, token: record.token, expiry: new Date(record.expiryMs) });
}
