/**
 * How long a node may rely on its etcd lease, sans I/O: the node reports what etcd3 tells it
 * (a grant, each keepalive sent, answered or failed, a loss) and asks `confirmed` before it
 * serves, campaigns, sends or delivers.
 *
 * Its invariant: `confirmed` holds only while now < t + ttl − margin, on the monotonic clock,
 * where t is when the request behind the latest confirmation (the grant, or a keepalive etcd
 * answered) was sent. etcd counts the TTL from when it received that request, no earlier than t,
 * so the lease lives at least until t + ttl; the margin is min(ttl/4, 1 s). The monotonic clock
 * runs on while a process is stopped, so a node that resumes past that point is unconfirmed at
 * once. How the node acts on it: docs/ticketing-cluster.md, "How it works" (step-down).
 */

export class LeaseConfidence {
  readonly ttlMs: number;
  /** How long before the lease's proven end the node stops relying on it. */
  readonly marginMs: number;
  readonly #clock: () => number;
  /** The lease is proven alive until then (-Infinity: nothing confirmed since start or a loss). */
  #aliveUntil = -Infinity;
  /** When each keepalive not yet answered was sent, oldest first (etcd answers them in order). */
  readonly #sentAt: number[] = [];

  /** `clock`: monotonic ms (default `performance.now`). */
  constructor(ttlMs: number, clock: () => number = () => performance.now()) {
    this.ttlMs = ttlMs;
    this.marginMs = Math.min(ttlMs / 4, 1000);
    this.#clock = clock;
  }

  /** Whether the lease is sure now. */
  get confirmed(): boolean {
    return this.#clock() < this.#aliveUntil - this.marginMs;
  }

  /** Whether anything confirmed the lease since the node started or its lease was last lost
   * (false: still starting, rather than cut off from etcd). */
  get everConfirmed(): boolean {
    return this.#aliveUntil !== -Infinity;
  }

  /** A new lease is being requested: returns when, for `granted`. Keepalives sent for the
   * previous lease no longer count. */
  requested(): number {
    this.#sentAt.length = 0;
    return this.#clock();
  }

  /** etcd granted the lease requested at `requestedAt`. */
  granted(requestedAt: number): void {
    this.#extend(requestedAt);
  }

  keepaliveSent(): void {
    this.#sentAt.push(this.#clock());
  }

  /** etcd answered the oldest keepalive not yet answered. */
  keepaliveAnswered(): void {
    const sentAt = this.#sentAt.shift();
    if (sentAt !== undefined) this.#extend(sentAt);
  }

  /** A keepalive failed: no answer pending pairs with an earlier send any more. */
  keepaliveFailed(): void {
    this.#sentAt.length = 0;
  }

  /** etcd says the lease is gone: nothing is confirmed until a new lease is granted. */
  lost(): void {
    this.#aliveUntil = -Infinity;
  }

  /** Never moves the end back: a late answer to an older request proves less, not the opposite. */
  #extend(sentAt: number): void {
    this.#aliveUntil = Math.max(this.#aliveUntil, sentAt + this.ttlMs);
  }
}
