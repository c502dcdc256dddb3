/** The operator's public types and defaults (see ./index.ts). */

/**
 * - `held`: unexpired, and a process holds the generation's `.live` flock.
 * - `crashed`: unexpired, but nobody holds its `.live`: the holder died; the next acquire takes over.
 * - `expired`: past its expiry (the holder may still be alive: it reclaims it on renew unless
 *   someone takes it over first).
 * - `released`: a tombstone (owner "").
 * - `corrupt`: the record cannot be read (see `problem`); acquires fail until `repairLease`.
 */
export type LeaseState = 'held' | 'crashed' | 'expired' | 'released' | 'corrupt';
export const LEASE_STATES: readonly LeaseState[] = ['held', 'crashed', 'expired', 'released', 'corrupt'];

/** A process queued for the lease (an acquire with `waitMs`). */
export interface LeaseWaiter {
  readonly ticket: number;
  /** From the wait queue; undefined when the queue does not list it. */
  readonly owner: string | undefined;
  readonly pid: number | undefined;
}

/** One lease: what its record says, and what the kernel says about its holder. */
export interface LeaseRow {
  /** The session id: the record's `session` field, else the id asked for, else the safe name. */
  readonly id: string;
  readonly safeId: string;
  readonly state: LeaseState;
  /** The record's owner ("" for a tombstone); undefined when corrupt. */
  readonly owner: string | undefined;
  readonly token: bigint | undefined;
  readonly expiry: Date | undefined;
  /** Whether a process holds the recorded generation's `.live` flock (false for a tombstone,
   * undefined for a corrupt record). `expired` with `locked`: the holder is still running. */
  readonly locked: boolean | undefined;
  /** The process holding the generation's `.live` flock, where the OS tells (Linux: /proc/locks). */
  readonly pid: number | undefined;
  /** Processes queued for it, in arrival order. */
  readonly waiters: readonly LeaseWaiter[];
  /** The record file. */
  readonly path: string;
  /** Why a corrupt record cannot be read. */
  readonly problem: string | undefined;
}

/**
 * A file no lease needs (or, for `corrupt-copy`, kept for the operator):
 * - `orphan-live`: a `.live` file that is not the recorded generation's;
 * - `orphan-wait`: a `.wait` file of no queued live waiter;
 * - `temp`: a record write that never finished (`<safeID>.lease.json.<pid>-<n>.tmp`);
 * - `go-temp`: one of the Go original's (`.lease-<random>.json.tmp`, one pattern for the whole
 *   directory: its id is unknown, so `id` and `safeId` are "");
 * - `stray-lock`: a transition lock of an id that has no record;
 * - `corrupt-copy`: a corrupt record that `repairLease` set aside (`<safeID>.corrupt-<time>`).
 */
export type LeftoverKind = 'orphan-live' | 'orphan-wait' | 'temp' | 'go-temp' | 'stray-lock' | 'corrupt-copy';

export interface Leftover {
  readonly kind: LeftoverKind;
  /** The session id when a record of the same safe name tells it, else the safe name. */
  readonly id: string;
  readonly safeId: string;
  readonly path: string;
  /** The generation's token, for `orphan-live`. */
  readonly token: bigint | undefined;
  /** Whether a process holds it flocked (`.live`, `.wait` files); undefined when unknown. */
  readonly locked: boolean | undefined;
  readonly pid: number | undefined;
}

export interface Inspection {
  readonly dir: string;
  /** When it was read (the reference for expiries). */
  readonly at: Date;
  /** Sorted by id. */
  readonly leases: readonly LeaseRow[];
  /** Sorted by file name. */
  readonly leftovers: readonly Leftover[];
}

export interface InspectOptions {
  /** Only this session id. */
  readonly id?: string | undefined;
  /** Wall clock in epoch ms (tests); default Date.now. */
  readonly clock?: (() => number) | undefined;
}

export interface MutationOptions {
  /** How long to wait for the id's transition lock (held for microseconds by a running
   * operation; long only if a process is stopped inside one). Default 10 s. */
  readonly lockTimeoutMs?: number | undefined;
  readonly clock?: (() => number) | undefined;
}

export interface PruneOptions extends MutationOptions {
  /** Remove released (and dead expired) records only once their expiry is at least this old.
   * Default 24 h. 0 removes them all. */
  readonly olderThanMs?: number | undefined;
  /** Decide, report, change nothing (and take no lock). */
  readonly dryRun?: boolean | undefined;
  /** Only this session id. */
  readonly id?: string | undefined;
}

export type PrunedKind = 'record' | 'orphan-live' | 'orphan-wait' | 'temp' | 'go-temp' | 'lock';

export interface PruneRemoval {
  readonly kind: PrunedKind;
  readonly id: string;
  readonly safeId: string;
  readonly path: string;
  /** Why it may go, e.g. "released 3h0m ago". */
  readonly reason: string;
}

export interface PruneSkip {
  readonly id: string;
  readonly safeId: string;
  /** Why the id was left alone: entirely (queued waiters, corrupt record, lock busy), or its lease
   * (held, crashed but unexpired, newer than the prune age, a token ahead of the clock). */
  readonly reason: string;
}

export interface PruneResult {
  readonly dir: string;
  readonly dryRun: boolean;
  readonly olderThanMs: number;
  /** What was removed (or, in a dry run, would be). */
  readonly removed: readonly PruneRemoval[];
  /** Ids left alone, and why. */
  readonly skipped: readonly PruneSkip[];
  /** Removals that failed (the file stays; the next prune tries again). */
  readonly errors: ReadonlyArray<{ readonly path: string; readonly error: Error }>;
}

export type RepairResult =
  | {
      readonly status: 'repaired';
      readonly id: string;
      readonly path: string;
      readonly problem: string;
      readonly copy: string;
      readonly token: bigint;
      readonly removed: readonly string[];
      readonly stillHeldBy: readonly number[];
    }
  | { readonly status: 'healthy'; readonly id: string; readonly path: string }
  | { readonly status: 'missing'; readonly id: string; readonly path: string };

export type ForceReleaseResult =
  | {
      readonly status: 'released';
      readonly id: string;
      readonly path: string;
      /** What the record said before. */
      readonly previous: {
        readonly owner: string;
        readonly token: bigint;
        readonly expiry: Date;
        readonly state: 'held' | 'crashed' | 'expired';
      };
      /** The holder's process, if it was alive (it loses the lease at its next renew). */
      readonly pid: number | undefined;
      /** The tombstone's token. */
      readonly token: bigint;
    }
  | { readonly status: 'already-released'; readonly id: string; readonly path: string; readonly token: bigint }
  | { readonly status: 'missing'; readonly id: string; readonly path: string };

export const DEFAULT_PRUNE_AGE_MS = 24 * 3_600_000;
export const DEFAULT_LOCK_TIMEOUT_MS = 10_000;
/** A Go temp record has no id to lock, so only its age says no write is in progress: prune removes
 * it once it is both this old (a record write takes milliseconds) and older than `olderThanMs`. */
export const GO_TEMP_MIN_AGE_MS = 60_000;

/** Internal: the I/O layer (tests inject faults). Not part of the public API. */
export const kOperatorIO = Symbol('flocklease.operator.io');
