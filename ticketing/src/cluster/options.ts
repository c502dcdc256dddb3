/**
 * A cluster node's options: the one home of their defaults and bounds. The library checks them up
 * front (a TypeError or RangeError naming the option); `ticketing serve` parses its flags with the
 * same checks and reports their errors as usage errors. Loads nothing from etcd3: the CLI imports
 * it in single mode too.
 */
import { checkNumber, MAX_TIMER_MS } from '#kernel';
import type { EtcdTlsOptions } from './etcd.js';

export interface ClusterNodeOptions {
  /** etcd endpoints: `http://host:port`, or (all of them) `https://host:port`. */
  readonly etcd: readonly string[];
  /** TLS to https endpoints: CA (default: the system's), client certificate and key (PEM). */
  readonly etcdTls?: EtcdTlsOptions | undefined;
  /** etcd user and password, when etcd has authentication on. */
  readonly etcdUser?: { readonly name: string; readonly password: string } | undefined;
  /** `host:port` clients reach this node at: what `M` and `L` carry. */
  readonly advertise: string;
  /** Key prefix in etcd: 1-128 printable ASCII characters. Default `/ticketing/`. */
  readonly prefix?: string;
  /** Leadership lease, ms: a whole number of seconds (etcd's lease granularity) from 1 s to 1 h.
   * Default 2000. */
  readonly leaderTtlMs?: number;
  /** The grant lease of the lock table, ms. */
  readonly leaseMs: number;
  readonly maxKeys: number;
  readonly maxWaiters: number;
  readonly maxWaitersPerKey: number;
  /** Shared holders per key, and the greatest N of a semaphore (state.ts defaults when absent). */
  readonly maxSharedHolders?: number | undefined;
  readonly maxPermits?: number | undefined;
  /** Deadline of every etcd call, ms. Default 1000. */
  readonly callTimeoutMs?: number;
  /** etcd's `--max-txn-ops`. Default 128. */
  readonly maxTxnOps?: number;
  /** Most group-commit batches in flight at once, 1 to `MAX_COMMIT_WINDOW`. Default 4. */
  readonly commitWindow?: number;
}

export const CLUSTER_DEFAULTS = {
  prefix: '/ticketing/',
  leaderTtlMs: 2_000,
  callTimeoutMs: 1_000,
  maxTxnOps: 128,
  /** See docs/ticketing-bench.md, "Levers tried", for the measurement behind it. */
  commitWindow: 4,
} as const;

/**
 * The leader TTL's bounds. etcd leases count whole seconds, so 1 s is the least; above 1 h a
 * leader that dies without revoking its lease (a crash, a partition) would leave the lock space
 * without a leader for over an hour, which no setting should allow by mistake.
 */
const LEADER_TTL_MIN_MS = 1_000;
const LEADER_TTL_MAX_MS = 3_600_000;

/** The most batches a node lets be in flight. */
export const MAX_COMMIT_WINDOW = 64;

/** A whole number of seconds from 1 s to 1 h, in ms. `what` names the option in the error. */
export function checkLeaderTtlMs(value: unknown, what = 'leaderTtlMs'): number {
  const ms = checkNumber(value, what);
  if (ms % 1000 !== 0 || ms < LEADER_TTL_MIN_MS || ms > LEADER_TTL_MAX_MS) {
    throw new RangeError(
      `${what} must be a whole number of seconds from ${LEADER_TTL_MIN_MS / 1000}s to ${LEADER_TTL_MAX_MS / 3_600_000}h (etcd leases count whole seconds), got ${ms}ms`,
    );
  }
  return ms;
}

/** 1-128 printable ASCII characters without spaces (every etcd key name starts with it). */
export function checkPrefix(value: unknown, what = 'prefix'): string {
  if (typeof value !== 'string') throw new TypeError(`${what} must be a string, got ${typeof value}`);
  if (!/^[\x21-\x7e]{1,128}$/.test(value))
    throw new RangeError(
      `${what} must be 1-128 printable ASCII characters without spaces, got ${JSON.stringify(value)}`,
    );
  return value;
}

/** The options with every default filled in. */
export type ClusterConfig = ClusterNodeOptions & Required<Pick<ClusterNodeOptions, keyof typeof CLUSTER_DEFAULTS>>;

/** Checks every option (a TypeError or RangeError naming it) and fills in the defaults. */
export function resolveClusterOptions(options: ClusterNodeOptions): ClusterConfig {
  return {
    ...options,
    prefix: checkPrefix(options.prefix ?? CLUSTER_DEFAULTS.prefix),
    leaderTtlMs: checkLeaderTtlMs(options.leaderTtlMs ?? CLUSTER_DEFAULTS.leaderTtlMs),
    callTimeoutMs: checkNumber(options.callTimeoutMs ?? CLUSTER_DEFAULTS.callTimeoutMs, 'callTimeoutMs', {
      max: MAX_TIMER_MS,
    }),
    maxTxnOps: checkNumber(options.maxTxnOps ?? CLUSTER_DEFAULTS.maxTxnOps, 'maxTxnOps', { integer: true }),
    commitWindow: checkNumber(options.commitWindow ?? CLUSTER_DEFAULTS.commitWindow, 'commitWindow', {
      integer: true,
      max: MAX_COMMIT_WINDOW,
    }),
  };
}
