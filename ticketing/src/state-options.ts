/** The state machine's options (state.ts), their defaults, and the checks they pass up front. */
import { checkNumber, MAX_TOKEN } from '#kernel';
import { isValue } from './election-wire.js';
import { DEFAULT_MODE_LIMITS, isLockMode } from './modes.js';
import type { Command } from './state-types.js';

export interface TicketStateOptions {
  /** Lease length of every grant, ms. */
  readonly leaseMs: number;
  readonly maxKeys?: number;
  readonly maxWaiters?: number;
  readonly maxWaitersPerKey?: number;
  /** Shared holders of one key at once (modes.ts). */
  readonly maxSharedHolders?: number;
  /** The greatest N of a semaphore request (modes.ts). */
  readonly maxPermits?: number;
  /** Every token issued will be greater than this (a restart's high-water mark). */
  readonly lastToken?: bigint;
  /** `lazy` (single mode): an expired grant is dropped by the next acquire of its key or swept;
   * only the grants of a key with waiters or observers have deadlines. `eager` (cluster mode):
   * every grant has a deadline, so `nextDue` yields `expire` for every grant whose lease ran out. */
  readonly expiry?: 'lazy' | 'eager';
}

export const DEFAULT_LIMITS = {
  maxKeys: 1_000_000,
  maxWaiters: 100_000,
  maxWaitersPerKey: 10_000,
  ...DEFAULT_MODE_LIMITS,
} as const;

export interface CheckedStateOptions {
  readonly leaseMs: number;
  readonly maxKeys: number;
  readonly maxWaiters: number;
  readonly maxWaitersPerKey: number;
  readonly maxSharedHolders: number;
  readonly maxPermits: number;
  readonly lastToken: bigint;
  readonly eager: boolean;
}

/** The options with their defaults, or a TypeError/RangeError naming the first bad one. */
export function checkStateOptions(options: TicketStateOptions): CheckedStateOptions {
  if (typeof options !== 'object' || options === null) throw new TypeError('options must be an object');
  const lastToken = options.lastToken ?? 0n;
  if (typeof lastToken !== 'bigint' || lastToken < 0n || lastToken > MAX_TOKEN)
    throw new RangeError('lastToken must be a uint64 bigint');
  if (options.expiry !== undefined && options.expiry !== 'lazy' && options.expiry !== 'eager') {
    throw new RangeError("expiry must be 'lazy' or 'eager'");
  }
  return {
    leaseMs: checkNumber(options.leaseMs, 'leaseMs'),
    maxKeys: checkCount(options.maxKeys ?? DEFAULT_LIMITS.maxKeys, 'maxKeys'),
    maxWaiters: checkCountOrZero(options.maxWaiters ?? DEFAULT_LIMITS.maxWaiters, 'maxWaiters'),
    maxWaitersPerKey: checkCountOrZero(options.maxWaitersPerKey ?? DEFAULT_LIMITS.maxWaitersPerKey, 'maxWaitersPerKey'),
    maxSharedHolders: checkCount(options.maxSharedHolders ?? DEFAULT_LIMITS.maxSharedHolders, 'maxSharedHolders'),
    maxPermits: checkNumber(options.maxPermits ?? DEFAULT_LIMITS.maxPermits, 'maxPermits', {
      zero: true,
      integer: true,
      max: DEFAULT_LIMITS.maxPermits,
    }),
    lastToken,
    eager: options.expiry === 'eager',
  };
}

/** Counts: whole numbers, the kernel's rule. */
const checkCount = (value: unknown, what: string): number =>
  checkNumber(value, what, { integer: true, max: Number.MAX_SAFE_INTEGER });
const checkCountOrZero = (value: unknown, what: string): number =>
  checkNumber(value, what, { zero: true, integer: true, max: Number.MAX_SAFE_INTEGER });

/** An `adopt` command's fields (a stored grant), or a RangeError naming the first bad one. */
export function checkAdopt(command: Extract<Command, { type: 'adopt' }>): void {
  const { token, rev = 0n, value } = command;
  const mode = command.mode ?? 'x';
  if (typeof token !== 'bigint' || token < 1n || token > MAX_TOKEN)
    throw new RangeError('token must be a uint64 bigint');
  if (typeof rev !== 'bigint' || rev < 0n || rev > MAX_TOKEN) throw new RangeError('rev must be a uint64 bigint');
  if (!isLockMode(mode)) throw new RangeError(`mode must be 'x', 's' or 1..65535, got ${String(mode)}`);
  if (value !== undefined && (!isValue(value) || mode !== 'x'))
    throw new RangeError("value must be an exclusive grant's, 1-512 bytes of printable ASCII");
}
