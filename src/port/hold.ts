/**
 * A held lease that renews itself: acquire, then renew about every TTL/3 until released or lost.
 * Works over any backend that meets the port (it uses nothing else): `holdLease(lease, id, owner)`.
 * The built-in backends also offer it as `lease.hold(id, owner)`. `await using` (TypeScript, or
 * Node 24+) releases it at the end of the scope.
 */
import { RETRY_FIRST_MS, timerDelay } from '../kernel/timers.js';
import { LeaseExpiredError, type LeaseError } from './errors.js';
import type { AcquireOptions, LeaseGrant, SessionLease } from './types.js';
import { checkOptions, checkPositiveMs, resolveClock } from './validate.js';

export interface HoldOptions extends AcquireOptions {
  /** Called once when the lease is lost (taken over, broken, or expired while renew kept failing). */
  readonly onLost?: ((reason: LeaseError) => void) | undefined;
  /** How often to renew; default a third of the first grant's lifetime (ttlMs / 3). */
  readonly renewEveryMs?: number | undefined;
  /** The backend's clock, in epoch ms (default Date.now): decides when a failing renew gives up. */
  readonly clock?: (() => number) | undefined;
}

export interface LeaseHold extends AsyncDisposable {
  /** The current grant (a fresh one after every renew; the token never changes). */
  readonly grant: LeaseGrant;
  /** Aborts when the lease is lost (reason: the LeaseError) or released (reason: an AbortError). */
  readonly signal: AbortSignal;
  /** True once the lease is lost. */
  readonly lost: boolean;
  /** Stops renewing and releases the lease. Idempotent; a no-op once lost. */
  release(): Promise<void>;
}

/** Acquires `sessionId` for `owner` on any `SessionLease` and keeps it renewed until released or lost. */
export async function holdLease(
  lease: SessionLease,
  sessionId: string,
  owner: string,
  options: HoldOptions = {},
): Promise<LeaseHold> {
  checkOptions(options, 'options');
  if (options.onLost !== undefined && typeof options.onLost !== 'function')
    throw new TypeError('onLost must be a function');
  checkPositiveMs(options.renewEveryMs, 'renewEveryMs');
  const clock = resolveClock(options.clock);
  const grant = await lease.acquire(sessionId, owner, { waitMs: options.waitMs, signal: options.signal });
  // The port carries no TTL: the first grant's remaining lifetime is it (renew well before it ends).
  const renewEveryMs = options.renewEveryMs ?? Math.max(1, (grant.expiry.getTime() - clock()) / 3);
  return new Hold(lease, grant, renewEveryMs, clock, options.onLost, options.signal);
}

class Hold implements LeaseHold {
  #grant: LeaseGrant;
  readonly #lease: SessionLease;
  readonly #renewEveryMs: number;
  readonly #clock: () => number;
  readonly #onLost: ((reason: LeaseError) => void) | undefined;
  readonly #controller = new AbortController();
  readonly #parent: AbortSignal | undefined;
  readonly #onParentAbort = (): void => void this.release().catch(() => {}); // best effort: the kernel frees it at exit anyway
  #timer: NodeJS.Timeout | undefined;
  #renewing: Promise<void> | undefined;
  #releasing: Promise<void> | undefined;
  #lost = false;

  constructor(
    lease: SessionLease,
    grant: LeaseGrant,
    renewEveryMs: number,
    clock: () => number,
    onLost: ((reason: LeaseError) => void) | undefined,
    parent: AbortSignal | undefined,
  ) {
    this.#lease = lease;
    this.#grant = grant;
    this.#renewEveryMs = renewEveryMs;
    this.#clock = clock;
    this.#onLost = onLost;
    this.#parent = parent;
    parent?.addEventListener('abort', this.#onParentAbort, { once: true });
    this.#schedule(renewEveryMs);
  }

  get grant(): LeaseGrant {
    return this.#grant;
  }

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  get lost(): boolean {
    return this.#lost;
  }

  #schedule(ms: number): void {
    // Unref'd: a lease held by a process with nothing left to do must not keep it alive (its
    // flocks go when it exits, and the next acquire takes over at once).
    this.#timer = setTimeout(() => {
      this.#renewing = this.#renew().finally(() => (this.#renewing = undefined));
    }, timerDelay(ms)).unref();
  }

  async #renew(retryMs = RETRY_FIRST_MS): Promise<void> {
    if (this.#releasing !== undefined || this.#lost) return;
    try {
      // After a suspension past the TTL this is the reclaim: it succeeds if nobody took over.
      this.#grant = await this.#lease.renew(this.#grant);
      this.#schedule(this.#renewEveryMs);
    } catch (error) {
      if (this.#releasing !== undefined) return;
      const code = (error as { code?: unknown }).code;
      if (code === 'ELEASEHELD') return this.#lose(error as LeaseError);
      const leftMs = this.#grant.expiry.getTime() - this.#clock();
      if (leftMs <= 0) {
        const expired = new LeaseExpiredError(
          `lease ${JSON.stringify(this.#grant.sessionId)} expired before it could be renewed: ${(error as Error).message}`,
          this.#grant.sessionId,
          { cause: error },
        );
        return this.#lose(expired);
      }
      // Transient (I/O error, transition lock busy): retry, faster and faster as the expiry nears.
      this.#timer = setTimeout(
        () => {
          this.#renewing = this.#renew(retryMs * 2).finally(() => (this.#renewing = undefined));
        },
        timerDelay(Math.min(retryMs, Math.max(1, leftMs / 2), this.#renewEveryMs)),
      ).unref();
    }
  }

  #lose(reason: LeaseError): void {
    this.#lost = true;
    clearTimeout(this.#timer);
    this.#parent?.removeEventListener('abort', this.#onParentAbort);
    this.#controller.abort(reason);
    this.#onLost?.(reason);
  }

  release(): Promise<void> {
    this.#releasing ??= (async () => {
      clearTimeout(this.#timer);
      this.#parent?.removeEventListener('abort', this.#onParentAbort);
      await this.#renewing;
      if (!this.#lost) {
        try {
          await this.#lease.release(this.#grant);
        } catch (error) {
          this.#releasing = undefined; // let the caller try again
          throw error;
        }
        this.#controller.abort(new DOMException('the lease was released', 'AbortError'));
      }
    })();
    return this.#releasing;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.release();
  }
}
