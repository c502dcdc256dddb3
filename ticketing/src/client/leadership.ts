/**
 * `client.campaign()`: leader election on a key (docs/ticketing-election-client.md). A leadership
 * is a `hold()` of the key in exclusive mode, plus the value the leader publishes (where it serves,
 * say) for every observer to see. Its signal aborts by the hold's rule (the local deadline, or the
 * server's `G`), and at once when the server answers a publish `G`: either way the key is no longer
 * this leader's.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { RETRY_FIRST_MS } from '#kernel';
import { ConnectError, IndeterminateError, LockLostError } from '../errors.js';
import type { HoldOptions, TicketHold } from './hold.js';
import { checkValue, type PublishResult, type ReleaseResult } from './options.js';

export interface CampaignOptions extends Omit<HoldOptions, 'permits' | 'shared'> {
  /** Published as soon as the key is held, before `campaign()` resolves. */
  readonly value?: string | undefined;
}

/** This client leads the key until `signal` aborts: a `TicketHold` (its `token` is the fencing
 * token; `release()` is `resign()`) that publishes. `await using` resigns at the end of the scope. */
export interface Leadership extends TicketHold {
  /** Aborts when the leadership is lost (reason: a `LockLostError`, or the error that ended
   * keeping) or resigned (reason: an AbortError). */
  readonly signal: AbortSignal;
  /** Publishes `value` (1-512 bytes of printable ASCII) as this leader's; resolves once the server
   * confirmed it. Publishes run one after another, in call order. Rejects with `LockLostError`
   * (`gone`) when the key is no longer held under this token (the signal aborts with it too). */
  publish(value: string): Promise<PublishResult>;
  /** Stops keeping and releases the key (as `release()`): observers see it vacant or handed on. */
  resign(): Promise<ReleaseResult>;
}

/** What a campaign needs of its client. */
export interface CampaignHost {
  hold(key: string, options: HoldOptions): Promise<TicketHold>;
  publish(key: string, token: bigint, value: string): Promise<PublishResult>;
}

export async function startCampaign(host: CampaignHost, key: string, options: CampaignOptions): Promise<Leadership> {
  if (typeof options !== 'object' || options === null) throw new TypeError('options must be an object');
  const { value, ...holdOptions } = options;
  if (value !== undefined) checkValue(value, 'options.value');
  for (const mode of ['permits', 'shared'] as const) {
    if ((options as HoldOptions)[mode] !== undefined)
      throw new TypeError(`options.${mode}: a leadership is an exclusive hold`);
  }
  const hold = await host.hold(key, holdOptions);
  const leadership = new Lead(host, hold);
  if (value !== undefined) {
    try {
      await leadership.publish(value);
    } catch (error) {
      void leadership.resign().catch(() => {}); // re-sent until answered or expired
      throw error;
    }
  }
  return leadership;
}

class Lead implements Leadership {
  readonly key: string;
  readonly owner: string;
  readonly token: bigint;
  readonly slot = undefined;
  readonly signal: AbortSignal;
  readonly #host: CampaignHost;
  readonly #hold: TicketHold;
  /** Aborts on a publish's `G`. */
  readonly #gone = new AbortController();
  #publishing: Promise<unknown> = Promise.resolve();

  constructor(host: CampaignHost, hold: TicketHold) {
    this.#host = host;
    this.#hold = hold;
    this.key = hold.key;
    this.owner = hold.owner;
    this.token = hold.token;
    this.signal = AbortSignal.any([hold.signal, this.#gone.signal]);
  }

  publish(value: string): Promise<PublishResult> {
    try {
      checkValue(value);
    } catch (error) {
      return Promise.reject(error);
    }
    const published = this.#publishing.then(() => this.#publishUntilAnswered(value));
    this.#publishing = published.catch(() => {});
    return published;
  }

  /**
   * Sends the publish again while its answer is lost (a connection that failed, a failover), until
   * the leadership ends: publishing the same value twice under one token leaves the same value.
   */
  async #publishUntilAnswered(value: string): Promise<PublishResult> {
    let retryMs = RETRY_FIRST_MS;
    for (;;) {
      this.signal.throwIfAborted();
      try {
        return await this.#host.publish(this.key, this.token, value);
      } catch (error) {
        if (error instanceof LockLostError) {
          this.#gone.abort(error);
          void this.#hold.release().catch(() => {}); // stops keeping; the server says not-held
          throw error;
        }
        if (!(error instanceof IndeterminateError || error instanceof ConnectError)) throw error;
      }
      await sleep(retryMs, undefined, { signal: this.signal }).catch(() => {}); // aborted: thrown above

      retryMs = Math.min(retryMs * 2, 1_000);
    }
  }

  get leaseMs(): number {
    return this.#hold.leaseMs;
  }
  get deadline(): Date {
    return this.#hold.deadline;
  }

  resign(): Promise<ReleaseResult> {
    return this.#hold.release();
  }
  release(): Promise<ReleaseResult> {
    return this.#hold.release();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.resign();
  }
}
