/** Up-front argument checks: a bad argument throws before any file is touched. */
import type { LeaseGrant } from './types.js';
import { checkOptionalNumber } from '../kernel/numbers.js';
import { MAX_TOKEN } from '../kernel/token.js';

const DEFAULT_TTL_MS = 30_000;
/** 9999-12-31T23:59:59.999Z: the last instant RFC 3339 (and Go's time) can write. */
export const MAX_EXPIRY_MS = 253_402_300_799_999;

/** Session ids and owners: non-empty, well-formed Unicode (a lone surrogate has no UTF-8 form,
 * so two different ids could hash alike and share files). */
function checkName(value: unknown, what: string): asserts value is string {
  if (typeof value !== 'string') throw new TypeError(`${what} must be a string, got ${typeof value}`);
  if (value.length === 0) throw new TypeError(`${what} must not be empty`);
  if (!value.isWellFormed()) throw new TypeError(`${what} must be well-formed Unicode (it has a lone surrogate)`);
}

export function checkSessionId(value: unknown): asserts value is string {
  checkName(value, 'sessionId');
}

export function checkOwner(value: unknown): asserts value is string {
  checkName(value, 'owner');
}

/** A grant must have the shape acquire/renew return; forged values are checked against state later. */
export function checkGrant(value: unknown): asserts value is LeaseGrant {
  if (typeof value !== 'object' || value === null) throw new TypeError('grant must be a LeaseGrant object');
  const grant = value as Record<string, unknown>;
  checkSessionId(grant.sessionId);
  checkOwner(grant.owner);
  if (typeof grant.token !== 'bigint') throw new TypeError('grant.token must be a bigint');
  if (grant.token < 0n || grant.token > MAX_TOKEN) throw new RangeError('grant.token must be a uint64');
  if (!(grant.expiry instanceof Date) || Number.isNaN(grant.expiry.getTime())) {
    throw new TypeError('grant.expiry must be a valid Date');
  }
}

export function checkOptions(value: unknown, what: string): void {
  if (value !== undefined && (typeof value !== 'object' || value === null)) {
    throw new TypeError(`${what} must be an object`);
  }
}

function checkSignal(value: unknown): asserts value is AbortSignal | undefined {
  if (value !== undefined && !(value instanceof AbortSignal)) throw new TypeError('signal must be an AbortSignal');
}

/** A millisecond duration that must be a finite positive number when given (the kernel's rule). */
export function checkPositiveMs(value: unknown, what: string): asserts value is number | undefined {
  checkOptionalNumber(value, what);
}

/** A wait: absent means 0 (do not wait); Infinity waits until aborted. */
export function resolveWaitMs(value: unknown): number {
  if (value === undefined) return 0;
  if (typeof value !== 'number') throw new TypeError('waitMs must be a number');
  if (Number.isNaN(value) || value < 0) throw new RangeError(`waitMs must be 0 or more, got ${value}`);
  return value;
}

/** Missing or non-positive means the default (the Go original's rule); NaN, Infinity or an
 * expiry past year 9999 is a RangeError. */
function resolveTtl(value: unknown, now: number): number {
  if (value === undefined) return DEFAULT_TTL_MS;
  if (typeof value !== 'number') throw new TypeError('ttlMs must be a number');
  if (Number.isNaN(value) || value === Infinity) throw new RangeError(`ttlMs must be finite, got ${value}`);
  if (value <= 0) return DEFAULT_TTL_MS;
  checkExpiry(now + value);
  return value;
}

export function resolveClock(value: unknown): () => number {
  if (value === undefined) return Date.now;
  if (typeof value !== 'function') throw new TypeError('clock must be a function returning epoch milliseconds');
  return value as () => number;
}

/** A backend's options, checked up front: its clock and its lease length (both backends alike). */
export function resolveLeaseOptions(options: { readonly clock?: unknown; readonly ttlMs?: unknown }): {
  clock: () => number;
  ttlMs: number;
} {
  checkOptions(options, 'options');
  const clock = resolveClock(options.clock);
  return { clock, ttlMs: resolveTtl(options.ttlMs, readClock(clock)) };
}

/** An operation's options: an object if given, its signal an AbortSignal if given; the signal. */
export function operationSignal(options: { readonly signal?: unknown } | undefined): AbortSignal | undefined {
  checkOptions(options, 'options');
  checkSignal(options?.signal);
  return options?.signal;
}

/** Reads the clock, refusing a value no record could hold. */
export function readClock(clock: () => number): number {
  const now = clock();
  if (typeof now !== 'number' || !Number.isFinite(now))
    throw new TypeError(`clock() must return a finite number, got ${String(now)}`);
  return now;
}

export function checkExpiry(expiryMs: number): void {
  if (!(expiryMs <= MAX_EXPIRY_MS)) {
    throw new RangeError(
      `expiry ${expiryMs} ms is past 9999-12-31T23:59:59.999Z, the last RFC 3339 instant: ttlMs is too large`,
    );
  }
}
