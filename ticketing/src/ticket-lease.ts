/**
 * `TicketLease`: the `SessionLease` port (flocklease's src/port/types.ts) over a `TicketClient`, so
 * code written against the port (`holdLease` included) moves from a lease directory to a Ticketing
 * server or cluster by changing one constructor. A session id is a key; `acquire` is an `A` followed
 * at once by a `K` (the grant's expiry then rests on the lease the server applied); `renew` is a
 * `K`; `release` an exact-token `R`. Where the port's rules cannot hold over this protocol,
 * docs/ticketing-client.md "TicketLease" lists the exceptions.
 */
import type { TicketClient } from './client.js';
import { LeaseHeldError, LockLostError } from './errors.js';

/** The port's grant (structurally: flocklease's `LeaseGrant`). */
export interface TicketLeaseGrant {
  readonly sessionId: string;
  readonly owner: string;
  readonly token: bigint;
  readonly expiry: Date;
  /** A permit's slot (acquired with `permits`); absent otherwise. */
  readonly slot?: number | undefined;
}

/** The longest wait the server takes for an `A`, ms: what `waitMs: Infinity` becomes. */
const LONGEST_WAIT_MS = 2 ** 31 - 1;

export class TicketLease {
  readonly #client: TicketClient;

  constructor(client: TicketClient) {
    this.#client = client;
  }

  async acquire(
    sessionId: string,
    owner: string,
    options: {
      waitMs?: number | undefined;
      signal?: AbortSignal | undefined;
      /** One of N permits, or a shared hold: as `client.acquire`'s options. */
      permits?: number | undefined;
      shared?: boolean | undefined;
    } = {},
  ): Promise<TicketLeaseGrant> {
    checkText(sessionId, 'sessionId');
    checkText(owner, 'owner');
    if (typeof options !== 'object' || options === null) throw new TypeError('options must be an object');
    const waitMs = options.waitMs === Infinity ? LONGEST_WAIT_MS : (options.waitMs ?? 0);
    const { signal, permits, shared } = options;
    const result = await this.#client.acquire(sessionId, { owner, waitMs, signal, permits, shared });
    if (result.status !== 'acquired') {
      throw new LeaseHeldError(
        `lease ${JSON.stringify(sessionId)} is held${result.status === 'busy' ? ' (the server is busy)' : ''}`,
        sessionId,
      );
    }
    return this.#keep({ sessionId, owner, token: result.token, expiry: result.expiresAt, slot: result.slot });
  }

  renew(grant: TicketLeaseGrant): Promise<TicketLeaseGrant> {
    try {
      checkGrant(grant);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#keep(grant);
  }

  async release(grant: TicketLeaseGrant): Promise<void> {
    checkGrant(grant);
    await this.#client.release(grant.sessionId, grant.token);
  }

  async #keep(grant: TicketLeaseGrant): Promise<TicketLeaseGrant> {
    try {
      const kept = await this.#client.renew(grant.sessionId, grant.token);
      return Object.freeze({
        sessionId: grant.sessionId,
        owner: grant.owner,
        token: grant.token,
        expiry: kept.expiresAt,
        ...(grant.slot === undefined ? {} : { slot: grant.slot }),
      });
    } catch (error) {
      if (error instanceof LockLostError) {
        throw new LeaseHeldError(
          `lease ${JSON.stringify(grant.sessionId)} was lost: ${error.message}`,
          grant.sessionId,
          {
            cause: error,
          },
        );
      }
      throw error;
    }
  }
}

function checkText(value: unknown, what: string): asserts value is string {
  if (typeof value !== 'string' || value === '') throw new TypeError(`${what} must be a non-empty string`);
}

function checkGrant(grant: unknown): asserts grant is TicketLeaseGrant {
  if (typeof grant !== 'object' || grant === null) throw new TypeError('grant must be a LeaseGrant object');
  const g = grant as Partial<TicketLeaseGrant>;
  checkText(g.sessionId, 'grant.sessionId');
  checkText(g.owner, 'grant.owner');
  if (typeof g.token !== 'bigint') throw new TypeError('grant.token must be a bigint');
}
