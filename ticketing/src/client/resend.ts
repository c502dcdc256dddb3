/**
 * A release whose answer was lost is sent again (docs/ticketing-client.md "A release that survives a
 * failover"). An exact-token `R` is safe to repeat: a token is never reused, so a repeat can only
 * release that grant or say `N`. It goes out again, on the release lane, to whichever node leads,
 * until it is answered or the grant's lease has surely run out; without this, a leader that dies
 * with releases on their way leaves their grants to a new leader, which re-arms them for a full
 * lease although every holder had let go.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { RETRY_FIRST_MS, timerDelay } from '#kernel';
import { IndeterminateError } from '../errors.js';
import { now } from './clock.js';
import type { ReleaseResult } from './options.js';

const RETRY_MAX_MS = 500;

/**
 * Sends (`send`) until an answer, or until `endAt` (performance.now()): by then the grant has
 * expired on every node that was serving when the release was asked for. Rejects with the last
 * IndeterminateError when the time ran out or when a later attempt could not go out (the client
 * closed, no connection); any error of the first attempt but a lost answer is its own.
 */
export async function releaseUntilAnswered(
  send: (deadline: AbortSignal | undefined) => Promise<ReleaseResult>,
  endAt: number,
): Promise<ReleaseResult> {
  let lost: IndeterminateError | undefined;
  let retryMs = RETRY_FIRST_MS;
  for (;;) {
    try {
      // A repeat may not outlive the time left (the first attempt keeps the client's own limits).
      const left = Math.ceil(endAt - now());
      return await send(lost === undefined ? undefined : AbortSignal.timeout(timerDelay(Math.max(1, left))));
    } catch (error) {
      // Lost on the way (the connection ended, or no reply in time): it may or may not have been
      // applied, and a repeat settles which. An abort is the caller's: not repeated.
      const repeatable =
        error instanceof IndeterminateError &&
        (error.reason === 'connection-lost' || error.reason === 'response-timeout');
      if (!repeatable) throw lost ?? error;
      lost = error;
    }
    const left = endAt - now();
    if (left <= 0) throw lost;
    await sleep(Math.min(retryMs, left));
    retryMs = Math.min(retryMs * 2, RETRY_MAX_MS);
  }
}
