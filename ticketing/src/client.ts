/**
 * The pipelining client. Many requests share one connection and their replies come back in any
 * order, so every reply is matched by (op, key, identifier) — acquire-side replies (`A`/`T`/`B`)
 * by the request's owner, release-side replies (`R`/`N`) by the token — never by position.
 * Releases travel on a separate, reserved connection (the release lane), so a release never
 * waits behind acquires and an orphaned grant can always be handed back.
 *
 * What the client promises about outcomes (docs/ticketing-client.md):
 * - a resolved result is definitive (acquired / timed out / busy; released / not held);
 * - `IndeterminateError` means bytes of the request were sent and no definitive reply came: the
 *   request may have taken effect. An acquire is never re-sent with the same owner to find out;
 * - any other rejection means the request did not take effect.
 *
 * The parts, in client/: options.ts (options, defaults, argument checks), pending.ts (the
 * registry of pending requests), lane.ts (a connection: lifecycle, backoff, watchdog, reply
 * matching), outcomes.ts (the error of a request whose connection ended), keep.ts (the keep
 * request and its replies), hold.ts (`hold()`), clock.ts (the clock and the local deadline),
 * resend.ts (a release whose answer was lost), observations.ts (publish answers and observers, on
 * the observe lane), leadership.ts (`campaign()`); the reply grammar is in protocol.ts and
 * election-wire.ts. This file is the public surface that ties them together.
 */
import { performance } from 'node:perf_hooks';
import { leaseEnd, now, wallClock } from './client/clock.js';
import { startHold, type HoldOptions, type TicketHold } from './client/hold.js';
import type { KeepResult } from './client/keep.js';
import { startCampaign, type CampaignOptions, type Leadership } from './client/leadership.js';
import { Observations, type Observation } from './client/observations.js';
import { releaseUntilAnswered } from './client/resend.js';
import {
  checkAcquire,
  checkObserve,
  checkPublish,
  checkRelease,
  parseEndpoint,
  resolveClientOptions,
  type AcquireOptions,
  type AcquireResult,
  type Endpoint,
  type PublishResult,
  type ReleaseOptions,
  type ReleaseResult,
  type ResolvedClientOptions,
  type TicketClientOptions,
} from './client/options.js';
import { ClientClosedError, DuplicateRequestError } from './errors.js';
import { channels, publish } from './events.js';
import { Lane, type LaneHost } from './client/lane.js';
import {
  PendingRegistry,
  unsent,
  type Pending,
  type PendingAcquire,
  type PendingKeep,
  type PendingPublish,
  type PendingRelease,
} from './client/pending.js';
import { formatPublish } from './election-wire.js';
import { formatAcquire, formatKeep, formatRelease } from './protocol.js';

export type {
  AcquireOptions,
  AcquireResult,
  BackoffOptions,
  PublishResult,
  ReleaseOptions,
  ReleaseResult,
  TicketClientOptions,
} from './client/options.js';
export type { HoldOptions, TicketHold } from './client/hold.js';
export type { CampaignOptions, Leadership } from './client/leadership.js';
export type { Observation, ObservedView } from './client/observations.js';

/** A confirmed keep. */
export interface RenewResult {
  readonly key: string;
  readonly token: bigint;
  /** The lease the server applied, ms. */
  readonly leaseMs: number;
  /** The lease's end counted from when the keep was sent (the server applied it no earlier), on
   * this host's clock. Stop before it: the server's clock may run a little faster. */
  readonly expiresAt: Date;
}

/**
 * A pipelining client for one ticketing server (or a cluster's allowlisted nodes).
 *
 * ```ts
 * const client = new TicketClient({ port: 7070 });
 * const r = await client.acquire('orders', { waitMs: 5_000 });
 * if (r.status === 'acquired') {
 *   try { await work(r.token); } finally { await client.release('orders', r.token); }
 * }
 * await client.close();
 * ```
 */
export class TicketClient {
  readonly leaseMs: number;
  readonly #options: ResolvedClientOptions;
  readonly #allowlist: Set<string>;
  readonly #registry: PendingRegistry;
  readonly #acquireLane: Lane;
  readonly #releaseLane: Lane;
  /** Publishes and observations. */
  readonly #observeLane: Lane;
  readonly #observations: Observations;
  #ownerSeq = 0;
  /** The longest lease a `K` reply reported: bounds how long a lost release is re-sent. */
  #learnedLeaseMs = 0;
  /** Releases until they settle, re-sends included (close() waits for them). */
  readonly #releasing = new Set<Promise<unknown>>();
  #leaderHint: Endpoint | undefined;
  #closed = false;
  #closing: Promise<void> | undefined;

  constructor(options: TicketClientOptions) {
    this.#options = resolveClientOptions(options);
    this.leaseMs = this.#options.leaseMs;
    this.#allowlist = new Set(this.#options.endpoints.map((e) => e.text));
    this.#registry = new PendingRegistry((p) => this.#releaseLane.submit(p));
    const leaderHint = (): string | undefined => this.leaderHint;
    const host: LaneHost = {
      client: this,
      get leaderHint() {
        return leaderHint();
      },
      pickEndpoint: (failures) => this.#pickEndpoint(failures),
      setLeaderHint: (address, via) => this.#setLeaderHint(address, via),
      orphanRelease: (key, token) => this.#orphanRelease(key, token),
      retryBusy: (p) => this.#scheduleBusyRetry(p),
    };
    this.#acquireLane = new Lane(this.#options, this.#registry, host, 'acquire');
    this.#releaseLane = new Lane(this.#options, this.#registry, host, 'release');
    this.#observations = new Observations(
      { send: (line) => this.#observeLane.send(line), answered: (p) => this.#observeLane.answered(p) },
      this.#registry,
    );
    this.#observeLane = new Lane(this.#options, this.#registry, host, 'observe', this.#observations);
  }

  get #lanes(): Lane[] {
    return [this.#acquireLane, this.#releaseLane, this.#observeLane];
  }

  /** The current leader hint (cluster mode), if any. */
  get leaderHint(): string | undefined {
    return this.#leaderHint?.text;
  }

  /** Requests sent and not yet answered, and requests waiting for a connection. */
  get pending(): { readonly inFlight: number; readonly queued: number } {
    const lanes = this.#lanes;
    return {
      inFlight: lanes.reduce((sum, lane) => sum + lane.inFlight, 0),
      queued: lanes.reduce((sum, lane) => sum + lane.queued, 0),
    };
  }

  /**
   * Asks for `key`. Resolves `acquired` (token, expiry), `timed-out` (held and `waitMs` 0, or the
   * wait ran out) or `busy` (a queue or server limit; not queued). `waitMs` defaults to 0 (a
   * try-lock). `permits` asks for one of N permits (the grant has a `slot`), `shared` for a
   * shared hold; a mode that does not fit the key's kind rejects with `ModeConflictError`, at
   * once. Rejects with `IndeterminateError` when the request was sent and no definitive
   * reply came, with `AuthFailedError`/`CapacityError` when the server refused its connection,
   * with `DuplicateRequestError` for a second pending acquire with the same (key, owner), with
   * `ConnectError` when no connection could be had to send it, and with the signal's reason when
   * aborted before sending. Bad arguments reject with TypeError/RangeError.
   */
  acquire(key: string, options: AcquireOptions = {}): Promise<AcquireResult> {
    let args: ReturnType<typeof checkAcquire>;
    let owner: string;
    try {
      args = checkAcquire(key, options, this.#closed);
      owner = args.owner ?? this.#options.ownerPrefix + (this.#ownerSeq++).toString(36);
      if (this.#registry.findAcquire(owner, key) !== undefined) {
        throw new DuplicateRequestError(
          `an acquire of ${key} with owner ${owner} is already pending: its replies would be ambiguous`,
          key,
          owner,
        );
      }
    } catch (error) {
      const refusal = error as Error; // the checks throw TicketError, TypeError or RangeError
      return Promise.reject(refusal);
    }
    const { waitMs, signal, mode } = args;
    const retryBusy = (args.retryBusy ?? this.#options.retryByDefault) ? this.#options.busyPolicy : undefined;
    return new Promise<AcquireResult>((resolve, reject) => {
      const submittedAt = now();
      const p: PendingAcquire = {
        kind: 'acquire',
        key,
        owner,
        ownerNext: undefined,
        waitMs,
        deadline: submittedAt + waitMs,
        retryBusy,
        attempt: 0,
        retryTimer: undefined,
        mode,
        permits: typeof mode === 'number' ? mode : 0,
        line: formatAcquire(key, owner, waitMs, mode),
        ...unsent(signal, submittedAt),
        resolve,
        reject,
      };
      this.#registry.addAcquire(p);
      this.#watchAbort(p);
      this.#acquireLane.submit(p);
    });
  }

  /**
   * Releases the grant with exactly this token (on the release lane). Resolves `released` or
   * `not-held`; rejects with `IndeterminateError` when it was sent and no reply came (releasing
   * again is safe: a token is exact, so a repeat can only say `not-held`).
   */
  release(key: string, token: bigint | string, options?: ReleaseOptions): Promise<ReleaseResult> {
    let args: ReturnType<typeof checkRelease>;
    try {
      args = checkRelease(key, token, options, this.#closed);
    } catch (error) {
      const refusal = error as Error; // the checks throw TicketError, TypeError or RangeError
      return Promise.reject(refusal);
    }
    return this.#release(key, args.tokenText, args.signal);
  }

  /**
   * Keeps the grant with exactly this token (`K`, on the release lane): its expiry becomes now +
   * the server's lease. Resolves `{ leaseMs, expiresAt }`. Rejects with `LockLostError` when the
   * key is not held under this token (`G`), with `IndeterminateError` when it was sent and no
   * reply came, with `DuplicateRequestError` while another keep of this (key, token) is pending,
   * and otherwise as `release` does.
   */
  renew(key: string, token: bigint | string, options?: ReleaseOptions): Promise<RenewResult> {
    let args: ReturnType<typeof checkRelease>;
    try {
      args = checkRelease(key, token, options, this.#closed);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#keep(key, args.tokenText, args.signal).then((kept) => ({
      key,
      token: kept.token,
      leaseMs: kept.leaseMs,
      expiresAt: wallClock(leaseEnd(kept.sentAt, kept.leaseMs)),
    }));
  }

  /**
   * Acquires `key` and keeps it alive until released or lost (docs/ticketing-client.md "Keeping a lock").
   * Resolves once the first keep confirmed the grant, with `{ token, signal, release() }`:
   * `signal` aborts no later than the local deadline unless a keep moved it, and at once when the
   * server says the lock is gone. Rejects with `NotAcquiredError` when the key stayed held
   * (`waitMs`) or the server was busy, with `LockLostError` when the grant could not be kept, and
   * as `acquire` does.
   */
  hold(key: string, options: HoldOptions = {}): Promise<TicketHold> {
    return startHold(
      {
        acquire: (k, o) => this.acquire(k, o),
        keep: (k, t, signal) => this.#keep(k, t, signal),
        release: (k, t) => this.#release(k, t, undefined),
      },
      key,
      options,
    );
  }

  /**
   * Publishes `value` (1-512 bytes of printable ASCII) as the key's value, if the key is held in
   * exclusive mode under exactly `token` (`P`, on the observe lane). Resolves once the server
   * confirmed it; rejects with `LockLostError` (`gone`) when it is not so held (`G`: nothing
   * changed), with `DuplicateRequestError` while a publish of this (key, token) is pending, and
   * otherwise as `release` does. A bad value throws before anything is sent.
   */
  publish(key: string, token: bigint | string, value: string, options?: ReleaseOptions): Promise<PublishResult> {
    let args: ReturnType<typeof checkPublish>;
    try {
      args = checkPublish(key, token, value, options, this.#closed);
    } catch (error) {
      return Promise.reject(error);
    }
    const { tokenText, signal } = args;
    return new Promise<PublishResult>((resolve, reject) => {
      const p: PendingPublish = {
        kind: 'publish',
        key,
        token: BigInt(tokenText),
        tokenText,
        value,
        line: formatPublish(key, tokenText, value),
        waitMs: 0,
        tokenNext: undefined,
        ...unsent(signal, now()),
        resolve,
        reject,
      };
      this.#submitExclusive(p, this.#observeLane);
    });
  }

  /**
   * Observes `key` (docs/ticketing-election-client.md): an async iterator of its views
   * `{ rev, holder, holders }`, the current one first, then every change in rev order; a consumer
   * that falls behind gets the newest view, never a stale one, and never a rev it already had. It
   * goes on across reconnects and failovers, until the signal aborts or `return()` (a `break` out
   * of `for await`); it throws `ObservationLimitError` when the server refuses it over a limit,
   * `ClientClosedError` when the client closes, and a `RefusedError` when a server refuses the
   * connection (a wrong secret, a certificate). Observers of one key share one observation.
   */
  observe(key: string, options: ReleaseOptions = {}): Observation {
    return this.#observations.observe(key, checkObserve(key, options, this.#closed));
  }

  /**
   * Campaigns to lead `key` (docs/ticketing-election-client.md): holds it exclusively
   * (`hold()`, waiting up to `waitMs`), publishes `value` if given, and resolves a `Leadership`:
   * `token`, `signal` (aborts when the leadership is lost), `publish(value)`, `resign()`. Rejects
   * as `hold()` does; a bad `value` rejects with TypeError/RangeError before anything is sent.
   */
  campaign(key: string, options: CampaignOptions = {}): Promise<Leadership> {
    return startCampaign(
      { hold: (k, o) => this.hold(k, o), publish: (k, t, v) => this.publish(k, t, v) },
      key,
      options,
    );
  }

  /** Stops taking requests, rejects unsent ones (`ClientClosedError`), ends observations, waits for
   * the ones in flight to settle, then closes the connections. */
  close(): Promise<void> {
    return (this.#closing ??= this.#close());
  }

  /** Closes at once: requests in flight become Indeterminate, unsent ones are rejected. */
  destroy(): void {
    this.#closed = true;
    const closed = new ClientClosedError('the client was destroyed');
    this.#observations.endAll(closed);
    for (const lane of this.#lanes) {
      lane.closeQueued(closed);
      lane.destroy('destroyed');
    }
    this.#rejectOffLane(closed);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /** Settles what waits off the lanes (none of it is pending on the server). */
  #rejectOffLane(error: Error): void {
    for (const p of this.#registry.offLane()) {
      if (p.kind === 'acquire') clearTimeout(p.retryTimer);
      p.settled = true;
      this.#registry.remove(p);
      p.reject(error);
    }
  }

  async #close(): Promise<void> {
    this.#closed = true;
    this.#observations.endAll(new ClientClosedError('the client is closed'));
    for (const lane of [this.#acquireLane, this.#observeLane])
      lane.closeQueued(new ClientClosedError('the client is closed'));
    await Promise.all([this.#acquireLane.whenIdle(), this.#observeLane.whenIdle()]);
    // Releases already asked for (and orphan releases the acquires caused) still go out.
    while (
      this.#registry.releaseCount > 0 ||
      this.#releasing.size > 0 ||
      this.#releaseLane.inFlight + this.#releaseLane.queued > 0
    ) {
      await this.#releaseLane.whenIdle();
      await Promise.all(this.#releasing);
      await new Promise((resolve) => setImmediate(resolve));
    }
    this.#releaseLane.closeQueued(new ClientClosedError('the client is closed'));
    this.#rejectOffLane(new ClientClosedError('the client is closed'));
    for (const lane of this.#lanes) lane.end();
  }

  /** A release, sent again while its answer is lost, until the grant's lease surely ran out. */
  #release(key: string, tokenText: string, signal: AbortSignal | undefined): Promise<ReleaseResult> {
    const endAt = now() + Math.max(this.#learnedLeaseMs, this.leaseMs);
    const done = releaseUntilAnswered((deadline) => {
      if (this.#closed && this.#closing === undefined)
        return Promise.reject(new ClientClosedError('the client was destroyed'));
      const limit =
        deadline === undefined || signal === undefined ? (deadline ?? signal) : AbortSignal.any([signal, deadline]);
      return this.#releaseOnce(key, tokenText, limit);
    }, endAt);
    const settled: Promise<unknown> = done.then(
      () => this.#releasing.delete(settled),
      () => this.#releasing.delete(settled),
    );
    this.#releasing.add(settled);
    return done;
  }

  #releaseOnce(key: string, tokenText: string, signal: AbortSignal | undefined): Promise<ReleaseResult> {
    return new Promise<ReleaseResult>((resolve, reject) => {
      const p: PendingRelease = {
        kind: 'release',
        key,
        token: BigInt(tokenText),
        tokenText,
        line: formatRelease(key, tokenText),
        waitMs: 0,
        tokenNext: undefined,
        blocked: false,
        ...unsent(signal, now()),
        resolve,
        reject,
      };
      this.#watchAbort(p);
      // Two releases of one (key, token) in flight at once would make R/N ambiguous: a later one
      // waits for the earlier (and then, exact token as it is, can only get `not-held`).
      this.#registry.addRelease(p);
      if (!p.blocked) this.#releaseLane.submit(p);
    });
  }

  #keep(key: string, tokenText: string, signal: AbortSignal | undefined): Promise<KeepResult> {
    if (this.#closed) return Promise.reject(new ClientClosedError('the client is closed'));
    return new Promise<KeepResult>((resolve, reject) => {
      const p: PendingKeep = {
        kind: 'keep',
        key,
        token: BigInt(tokenText),
        tokenText,
        line: formatKeep(key, tokenText),
        waitMs: 0,
        tokenNext: undefined,
        ...unsent(signal, now()),
        resolve: (kept) => {
          if (kept.leaseMs > this.#learnedLeaseMs) this.#learnedLeaseMs = kept.leaseMs;
          resolve(kept);
        },
        reject,
      };
      this.#submitExclusive(p, this.#releaseLane);
    });
  }

  /** A keep or a publish: refused while one of its kind and (key, token) is pending (their replies
   * would be ambiguous), else sent on `lane`. */
  #submitExclusive(p: PendingKeep | PendingPublish, lane: Lane): void {
    if (!this.#registry.addExclusive(p)) {
      p.reject(
        new DuplicateRequestError(
          `a ${p.kind} of ${p.key} token ${p.tokenText} is already pending: its replies would be ambiguous`,
          p.key,
          undefined,
          p.token,
        ),
      );
      return;
    }
    if (p.signal?.aborted) {
      this.#registry.remove(p);
      p.reject(p.signal.reason);
      return;
    }
    this.#watchAbort(p);
    lane.submit(p);
  }

  #watchAbort(p: Pending): void {
    const signal = p.signal;
    if (signal === undefined) return;
    p.onAbort = () => {
      if (p.settled) return;
      if (p.lane === undefined) {
        // Not on a lane: an acquire between busy retries, or a release waiting behind one of the
        // same token. Nothing of it is pending on the server.
        p.settled = true;
        if (p.kind === 'acquire') clearTimeout(p.retryTimer);
        this.#registry.remove(p);
        p.reject(signal.reason);
        return;
      }
      (p.lane as Lane).abort(p, signal.reason);
    };
    signal.addEventListener('abort', p.onAbort, { once: true });
  }

  #scheduleBusyRetry(p: PendingAcquire): boolean {
    const policy = p.retryBusy;
    if (policy === undefined || this.#closed) return false;
    const remaining = p.deadline - performance.now();
    const base = Math.min(policy.maxMs, policy.initialMs * 2 ** Math.min(p.attempt, 30));
    const delay = base * (0.5 + Math.random() * 0.5);
    if (delay >= remaining) return false;
    p.attempt++;
    p.retryTimer = setTimeout(() => {
      p.retryTimer = undefined;
      if (p.settled) return;
      if (this.#closed) {
        p.settled = true;
        this.#registry.remove(p);
        p.reject(new ClientClosedError('the client is closed'));
        return;
      }
      const left = Math.max(0, Math.floor(p.deadline - performance.now()));
      p.waitMs = left;
      p.line = formatAcquire(p.key, p.owner, left, p.mode);
      p.submittedAt = performance.now();
      this.#acquireLane.submit(p);
    }, delay);
    return true;
  }

  #orphanRelease(key: string, token: string): void {
    if (this.#closed && this.#closing === undefined) return; // destroyed: nowhere to send it
    this.#release(key, token, undefined).then(
      (result) => publish(channels.clientOrphanRelease, () => ({ client: this, key, token: BigInt(token), result })),
      (error: unknown) =>
        publish(channels.clientOrphanRelease, () => ({ client: this, key, token: BigInt(token), error })),
    );
  }

  #pickEndpoint(failures: number): Endpoint {
    if (this.#leaderHint !== undefined && failures < 2) return this.#leaderHint;
    const endpoints = this.#options.endpoints;
    return endpoints[failures % endpoints.length]!;
  }

  #setLeaderHint(address: string | undefined, via: string): boolean {
    if (address === undefined) {
      if (this.#leaderHint === undefined) return true;
      this.#leaderHint = undefined;
    } else {
      // Only an address we were configured with: a server must not steer us anywhere else.
      const parsed = parseEndpoint(address);
      if (!this.#allowlist.has(parsed.text)) return false;
      this.#leaderHint = parsed;
    }
    publish(channels.clientLeader, () => ({ client: this, address, via }));
    return true;
  }
}
