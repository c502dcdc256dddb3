/**
 * The in-process reference backend: the port's rules with nothing but a Map and a clock. For tests
 * (inject a fake clock) and for single-process programs. There are no processes to crash here, so
 * an unexpired holder is always live.
 */
import { LeaseHeldError, LeaseTokenExhaustedError, type LeaseHolder } from '../port/errors.js';
import { channels, publish } from '../port/events.js';
import { nextToken } from '../port/token.js';
import type { LeaseGrant, LeaseOptions, OperationOptions, SessionLease } from '../port/types.js';
import {
  checkExpiry,
  checkGrant,
  checkOptions,
  checkOwner,
  checkSessionId,
  checkSignal,
  readClock,
  resolveClock,
  resolveTtl,
} from '../port/validate.js';

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

  constructor(options: LeaseOptions = {}) {
    checkOptions(options, 'options');
    this.#clock = resolveClock(options.clock);
    this.ttlMs = resolveTtl(options.ttlMs, readClock(this.#clock));
  }

  async acquire(sessionId: string, owner: string, options?: OperationOptions): Promise<LeaseGrant> {
    checkSessionId(sessionId);
    checkOwner(owner);
    checkOperation(options);
    const now = readClock(this.#clock);
    const expiryMs = now + this.ttlMs;
    checkExpiry(expiryMs);
    const record = this.#records.get(sessionId);
    if (record !== undefined && record.owner !== '' && record.expiryMs > now) {
      if (record.owner !== owner) {
        throw new LeaseHeldError(`lease ${JSON.stringify(sessionId)} is held by ${record.owner}`, sessionId, holderOf(record));
      }
      record.expiryMs = expiryMs; // same owner re-acquires: same token, fresh expiry
      const grant = grantOf(sessionId, record);
      publish(channels.acquire, () => ({ lease: this, grant, refreshed: true }));
      return grant;
    }
    const token = nextToken(record?.token ?? 0n, now);
    if (token === undefined) {
      throw new LeaseTokenExhaustedError(`lease ${JSON.stringify(sessionId)} has used every uint64 fencing token`, sessionId);
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
    checkOperation(options);
    const { sessionId, owner, token } = grant;
    const now = readClock(this.#clock);
    const expiryMs = now + this.ttlMs;
    checkExpiry(expiryMs);
    const record = this.#records.get(sessionId);
    if (record?.owner !== owner || record.token !== token) {
      const holder = record && holderOf(record);
      publish(channels.loss, () => ({ lease: this, sessionId, owner, token, holder }));
      throw new LeaseHeldError(`lease ${JSON.stringify(sessionId)} was lost by ${owner} (token ${token})`, sessionId, holder);
    }
    const expiredAt = record.expiryMs;
    record.expiryMs = expiryMs; // even if it had expired: nobody took it over (sleep-past-TTL reclaim)
    const renewed = grantOf(sessionId, record);
    if (expiredAt <= now) publish(channels.reclaim, () => ({ lease: this, grant: renewed, expiredAt: new Date(expiredAt) }));
    else publish(channels.renew, () => ({ lease: this, grant: renewed }));
    return renewed;
  }

  async release(grant: LeaseGrant, options?: OperationOptions): Promise<void> {
    checkGrant(grant);
    checkOperation(options);
    const record = this.#records.get(grant.sessionId);
    if (record?.owner !== grant.owner || record.token !== grant.token) return; // unknown or stale: no-op
    record.owner = '';
    record.expiryMs = readClock(this.#clock);
    publish(channels.release, () => ({ lease: this, grant }));
  }
}

function checkOperation(options: OperationOptions | undefined): void {
  checkOptions(options, 'options');
  checkSignal(options?.signal);
  options?.signal?.throwIfAborted();
}

function grantOf(sessionId: string, record: MemoryRecord): LeaseGrant {
  return Object.freeze({ sessionId, owner: record.owner, token: record.token, expiry: new Date(record.expiryMs) });
}

function holderOf(record: MemoryRecord): LeaseHolder {
  return Object.freeze({ owner: record.owner, token: record.token, expiry: new Date(record.expiryMs) });
}
