/**
 * `client.hold()`: acquire, keep alive, and know in time when the lock is lost (docs/ticketing-client.md
 * "Keeping a lock"). The first keep goes out at once after the grant, and `hold()` resolves on its
 * answer, so every deadline rests on the lease the server applied, never on the client's guess.
 * From then on a timer enforces the local deadline (clock.ts): the signal aborts by then unless a
 * newer keep moved it, whether or not any reply comes, and at once on `G`.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { checkNumber, RETRY_FIRST_MS, timerDelay } from '#kernel';
import {
  ClientClosedError,
  ForbiddenError,
  IndeterminateError,
  LockLostError,
  NotAcquiredError,
  ServerError,
} from '../errors.js';
import { DEFAULT_MARGIN, leaseEnd, now, type DeadlineMargin } from './clock.js';
import type { KeepResult } from './keep.js';
import type { AcquireOptions, AcquireResult, ReleaseResult } from './options.js';

export interface HoldOptions extends AcquireOptions {
  /** How often to keep, ms. Default a third of the lease the server applies. */
  readonly keepEveryMs?: number | undefined;
  /** The safety margin taken off every lease (clock.ts). Default 1 % of the lease + 50 ms. */
  readonly margin?: Partial<DeadlineMargin> | undefined;
}

/** A lock kept alive until released or lost. `await using` releases it at the end of the scope. */
export interface TicketHold extends AsyncDisposable {
  readonly key: string;
  readonly owner: string;
  /** Fencing token: pass it to the guarded resource. */
  readonly token: bigint;
  /** A permit's slot (`permits` given), 0…N−1; undefined otherwise. */
  readonly slot: number | undefined;
  /** The lease the server applies, ms (from its last `K` reply). */
  readonly leaseMs: number;
  /** The local deadline (wall clock): stop by then unless a keep moves it. */
  readonly deadline: Date;
  /** Aborts when the lock is lost (reason: a `LockLostError`, or the error that ended keeping) or
   * released (reason: an AbortError). */
  readonly signal: AbortSignal;
  /** Stops keeping and releases (exact token, re-sent until answered; see `client.release`).
   * Idempotent. After a `G` it resolves `not-held` without sending anything. */
  release(): Promise<ReleaseResult>;
}

/** What a hold needs of its client. */
export interface HoldHost {
  acquire(key: string, options: AcquireOptions): Promise<AcquireResult>;
  keep(key: string, token: string, signal: AbortSignal | undefined): Promise<KeepResult>;
  release(key: string, token: string): Promise<ReleaseResult>;
}

/** Answers from a node that is not the leader: this many are always followed; more while `waitMs`
 * lasts (during a failover followers name the dead leader, then none), after a pause each. */
const MAX_REDIRECTS = 8;
/** What a node that is not the serving leader answers: `M`, `E no_leader`, `E not_active`. */
const NOT_AT_LEADER = new Set(['moved', 'no_leader', 'not_active']);
const REDIRECT_PAUSE_MS = 50;

/**
 * The acquire, sent again when a node that is not the serving leader ended it (`M`: the client then
 * knows the leader; `E no_leader`, `E not_active`: a failover is under way), within the caller's
 * `waitMs`. Safe whatever the first attempt did: were it granted after all (its reply
 * lost in a step-down), that grant only makes the repeat wait or time out; nobody holds twice.
 */
async function acquireAtLeader(host: HoldHost, key: string, options: HoldOptions): Promise<AcquireResult> {
  const startedAt = now();
  for (let redirects = 0; ; redirects++) {
    const waitMs = Math.max(0, Math.floor((options.waitMs ?? 0) - (now() - startedAt)));
    try {
      return await host.acquire(key, { ...options, waitMs });
    } catch (error) {
      const redirected =
        error instanceof IndeterminateError &&
        error.cause instanceof ServerError &&
        NOT_AT_LEADER.has(error.cause.serverCode);
      const waitLeft = (options.waitMs ?? 0) - (now() - startedAt);
      if (!redirected || (redirects >= MAX_REDIRECTS && waitLeft <= REDIRECT_PAUSE_MS)) throw error;
      if (redirects >= MAX_REDIRECTS) await sleep(REDIRECT_PAUSE_MS, undefined, { signal: options.signal });
    }
  }
}

export async function startHold(host: HoldHost, key: string, options: HoldOptions): Promise<TicketHold> {
  if (typeof options !== 'object' || options === null) throw new TypeError('options must be an object');
  const keepEveryMs =
    options.keepEveryMs === undefined ? undefined : checkNumber(options.keepEveryMs, 'options.keepEveryMs');
  const margin = resolveMargin(options.margin);
  const acquired = await acquireAtLeader(host, key, options);
  if (acquired.status !== 'acquired') {
    throw new NotAcquiredError(
      acquired.status === 'busy'
        ? `${key} was not acquired: the server is at a queue limit (busy)`
        : `${key} is held by another owner${options.waitMs ? ` and was not released within ${options.waitMs} ms` : ''}`,
      key,
      acquired.owner,
      acquired.status,
    );
  }
  const token = acquired.token.toString();
  // Until the first keep answers, the client's lease guess bounds the retries (nobody acts on it).
  const guessEnd = now() + (acquired.expiresAt.getTime() - Date.now());
  let first: KeepResult;
  try {
    first = await keepUntil(host, key, token, guessEnd, options.signal);
  } catch (error) {
    if (!(error instanceof LockLostError && error.reason === 'gone')) {
      void host.release(key, token).catch(() => {}); // re-sent until answered or expired
    }
    throw error;
  }
  const hold = new Hold(host, key, acquired, first, keepEveryMs, margin, options.signal);
  if (hold.signal.aborted) throw hold.signal.reason as Error; // a lease shorter than one round trip and the margin
  return hold;
}

function resolveMargin(margin: HoldOptions['margin']): DeadlineMargin {
  if (margin === undefined) return DEFAULT_MARGIN;
  if (typeof margin !== 'object' || margin === null) throw new TypeError('options.margin must be an object');
  const fraction = margin.fraction ?? DEFAULT_MARGIN.fraction;
  if (typeof fraction !== 'number' || !(fraction >= 0 && fraction < 1))
    throw new RangeError('options.margin.fraction must be a number in [0, 1)');
  return {
    fraction,
    ms: margin.ms === undefined ? DEFAULT_MARGIN.ms : checkNumber(margin.ms, 'options.margin.ms', { zero: true }),
  };
}

/** Keeps until answered: retries what got no answer until `end` (performance.now()). `G` and a
 * closed client end it at once; `stop` ends it without touching the keep in flight (aborting a sent
 * request would close the release lane's connection under every other request on it). */
async function keepUntil(
  host: HoldHost,
  key: string,
  token: string,
  end: number,
  stop: AbortSignal | undefined,
  attemptMs = Infinity,
): Promise<KeepResult> {
  let retryMs = RETRY_FIRST_MS;
  for (;;) {
    stop?.throwIfAborted();
    const left = end - now();
    // An attempt may not outlive what is left, nor `attemptMs`: a keep stuck on a dead connection
    // is abandoned (its connection closed) so that the next one can go out on a fresh one.
    const attempt = AbortSignal.timeout(timerDelay(Math.ceil(Math.max(1, Math.min(left, attemptMs)))));
    try {
      return await untilAborted(host.keep(key, token, attempt), stop);
    } catch (error) {
      // Definitive: the lock is gone, the client closed, or the server's access rules forbid it.
      if (error instanceof LockLostError || error instanceof ClientClosedError || error instanceof ForbiddenError)
        throw error;
      stop?.throwIfAborted();
      const remaining = end - now();
      if (remaining <= 0) {
        throw new LockLostError(
          `${key} token ${token}: no keep was confirmed before the local deadline (${(error as Error).message})`,
          key,
          BigInt(token),
          'deadline',
          { cause: error },
        );
      }
      await new Promise((resolve) => setTimeout(resolve, Math.min(retryMs, remaining / 2)).unref());
      retryMs *= 2;
    }
  }
}

/** `promise`, or the signal's reason as soon as it aborts (the promise goes on, unobserved). */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return promise;
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason);
    if (signal.aborted) onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}

class Hold implements TicketHold {
  readonly key: string;
  readonly owner: string;
  readonly token: bigint;
  readonly slot: number | undefined;
  readonly #tokenText: string;
  readonly #host: HoldHost;
  readonly #keepEveryMs: number | undefined;
  readonly #margin: DeadlineMargin;
  readonly #controller = new AbortController();
  readonly #parent: AbortSignal | undefined;
  readonly #onParentAbort = (): void => void this.release().catch(() => {});
  #leaseMs: number;
  /** performance.now() of the local deadline. */
  #deadline: number;
  #deadlineTimer: NodeJS.Timeout | undefined;
  #keepTimer: NodeJS.Timeout | undefined;
  /** Stops the keep in flight (release, loss). */
  #keeping: AbortController | undefined;
  #releasing: Promise<ReleaseResult> | undefined;

  constructor(
    host: HoldHost,
    key: string,
    { owner, token, slot }: { readonly owner: string; readonly token: bigint; readonly slot?: number | undefined },
    first: KeepResult,
    keepEveryMs: number | undefined,
    margin: DeadlineMargin,
    parent: AbortSignal | undefined,
  ) {
    this.#host = host;
    this.key = key;
    this.owner = owner;
    this.token = token;
    this.slot = slot;
    this.#tokenText = token.toString();
    this.#keepEveryMs = keepEveryMs;
    this.#margin = margin;
    this.#leaseMs = first.leaseMs;
    this.#deadline = -Infinity;
    this.#parent = parent;
    parent?.addEventListener('abort', this.#onParentAbort, { once: true });
    this.#kept(first);
  }

  get leaseMs(): number {
    return this.#leaseMs;
  }
  get deadline(): Date {
    return new Date(Date.now() + (this.#deadline - now()));
  }
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** A confirmed keep: the deadline moves (never back), and the next keep is due a period after
   * this one was sent. */
  #kept(result: KeepResult): void {
    if (this.#done) return;
    this.#leaseMs = result.leaseMs;
    const deadline = leaseEnd(result.sentAt, result.leaseMs, this.#margin);
    if (deadline > this.#deadline) {
      this.#deadline = deadline;
      clearTimeout(this.#deadlineTimer);
      const left = deadline - now();
      if (left <= 0) {
        this.#lose(this.#expired(undefined));
        return;
      }
      this.#deadlineTimer = setTimeout(this.#onDeadline, timerDelay(left)).unref();
    }
    const every = this.#keepEveryMs ?? result.leaseMs / 3;
    clearTimeout(this.#keepTimer);
    this.#keepTimer = setTimeout(this.#keep, timerDelay(result.sentAt + every - now())).unref();
  }

  get #done(): boolean {
    return this.#controller.signal.aborted || this.#releasing !== undefined;
  }

  readonly #keep = (): void => {
    if (this.#done) return;
    const keeping = new AbortController();
    this.#keeping = keeping;
    const attemptMs = this.#keepEveryMs ?? this.#leaseMs / 3;
    keepUntil(this.#host, this.key, this.#tokenText, this.#deadline, keeping.signal, attemptMs).then(
      (result) => this.#kept(result),
      (error: unknown) => {
        if (keeping.signal.aborted) return; // released or lost meanwhile
        this.#lose(error);
      },
    );
  };

  readonly #onDeadline = (): void => {
    // A keep may have moved the deadline since this timer was set (it resets it; this is a guard).
    if (now() < this.#deadline) {
      this.#deadlineTimer = setTimeout(this.#onDeadline, timerDelay(this.#deadline - now())).unref();
      return;
    }
    this.#lose(this.#expired(undefined));
  };

  #expired(cause: unknown): LockLostError {
    return new LockLostError(
      `${this.key} token ${this.token}: the local deadline passed before a keep was confirmed`,
      this.key,
      this.token,
      'deadline',
      cause === undefined ? undefined : { cause },
    );
  }

  #stop(): void {
    clearTimeout(this.#deadlineTimer);
    clearTimeout(this.#keepTimer);
    this.#keeping?.abort();
    this.#parent?.removeEventListener('abort', this.#onParentAbort);
  }

  #lose(reason: unknown): void {
    if (this.#done) return;
    this.#controller.abort(reason);
    this.#stop();
  }

  release(): Promise<ReleaseResult> {
    if (this.#releasing !== undefined) return this.#releasing;
    const gone =
      this.signal.aborted && this.signal.reason instanceof LockLostError && this.signal.reason.reason === 'gone';
    this.#stop();
    if (!this.signal.aborted) this.#controller.abort(new DOMException('the lock was released', 'AbortError'));
    this.#releasing = gone
      ? Promise.resolve({ status: 'not-held', key: this.key, token: this.token })
      : this.#host.release(this.key, this.#tokenText);
    return this.#releasing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}
