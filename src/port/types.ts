/**
 * The port: the contract every lease backend meets (see README "The port").
 * `Lease` (a lease directory, flock-based) and `MemoryLease` (in-process reference) implement it,
 * and `flocklease/conformance` pins it for third-party backends too.
 */

/** An immutable grant; acquire and renew return a fresh one. */
export interface LeaseGrant {
  readonly sessionId: string;
  /** The holder's identity, e.g. `${hostname}-${pid}-${nonce}`. */
  readonly owner: string;
  /**
   * Fencing token (uint64): strictly greater on every takeover, unchanged by renew and by a
   * same-owner re-acquire. Pass it to the guarded resource, which rejects lower tokens.
   */
  readonly token: bigint;
  /** Wall-clock instant the lease lapses unless renewed. */
  readonly expiry: Date;
}

export interface OperationOptions {
  /** Abandons waiting (for the in-process gate or the transition lock); never a half-done write. */
  readonly signal?: AbortSignal | undefined;
}

export interface AcquireOptions extends OperationOptions {
  /**
   * Wait up to this many ms (Infinity: until `signal` aborts) for the holder to release, die or
   * expire, instead of failing at once; waiters are served in arrival order. Default 0.
   */
  readonly waitMs?: number | undefined;
}

export interface SessionLease {
  acquire(sessionId: string, owner: string, options?: AcquireOptions): Promise<LeaseGrant>;
  renew(grant: LeaseGrant, options?: OperationOptions): Promise<LeaseGrant>;
  release(grant: LeaseGrant, options?: OperationOptions): Promise<void>;
}

/** Options both backends share. */
export interface LeaseOptions {
  /** Lease length. Missing or non-positive: 30 000 ms (as in the Go original). */
  readonly ttlMs?: number | undefined;
  /** Wall clock in epoch milliseconds; defaults to `Date.now`. */
  readonly clock?: (() => number) | undefined;
}
