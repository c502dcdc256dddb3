/** Definite refusals against the real server: `E auth_failed` and `E capacity` come before any
 * request on the connection is processed, so the client reports them as their own errors, never
 * as Indeterminate (which would tell the caller to fear a lock it cannot hold). */
import { afterEach, describe, expect, test } from 'vitest';
import { TicketClient } from '../src/client.js';
import { AuthFailedError, CapacityError, IndeterminateError, ServerError, TicketError } from '../src/errors.js';
import { LineSocket, startServer, until } from './helpers.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

async function outcome<T>(promise: Promise<T>): Promise<T | Error> {
  try {
    return await promise;
  } catch (error) {
    return error as Error;
  }
}

describe('definite refusals are not Indeterminate', () => {
  test('a wrong secret: every pipelined request rejects with AuthFailedError, and nothing was processed', async () => {
    const { server, port, close } = await startServer({ secret: 'right-secret' });
    cleanups.push(close);
    const c = new TicketClient({ port, secret: 'wrong-secret', connectTimeoutMs: 1_000 });
    cleanups.push(() => c.destroy());
    // Written in one batch: all of them are on the wire before the E arrives.
    const results = await Promise.all([
      outcome(c.acquire('k1', { waitMs: 0, owner: 'o1' })),
      outcome(c.acquire('k2', { waitMs: 5_000, owner: 'o2' })),
      outcome(c.release('k3', 7n)),
    ]);
    for (const result of results) {
      expect(result).toBeInstanceOf(AuthFailedError);
      expect(result).toBeInstanceOf(TicketError);
      expect(result).not.toBeInstanceOf(IndeterminateError);
      expect(result).toMatchObject({ code: 'ETICKETAUTHFAILED' });
      expect((result as Error).cause).toBeInstanceOf(ServerError);
    }
    expect(results[0]).toMatchObject({ op: 'acquire', key: 'k1', owner: 'o1', token: undefined });
    expect(results[2]).toMatchObject({ op: 'release', key: 'k3', owner: undefined, token: 7n });
    expect(server.inspect('k1')).toBeUndefined();
    expect(server.inspect('k2')).toBeUndefined();
  });

  test('at --max-connections: CapacityError for every request sent, then service once a slot frees', async () => {
    const { server, port, close } = await startServer({ maxConnections: 1 });
    cleanups.push(close);
    const squatter = await LineSocket.connect(port);
    cleanups.push(() => squatter.destroy());
    const c = new TicketClient({ port, errorBackoffMs: { capacity: 50 }, backoff: { initialMs: 10, maxMs: 50 } });
    cleanups.push(() => c.destroy());
    const [a, b] = await Promise.all([
      outcome(c.acquire('k', { waitMs: 0, owner: 'o1' })),
      outcome(c.acquire('j', { waitMs: 0, owner: 'o2' })),
    ]);
    for (const result of [a, b]) {
      expect(result).toBeInstanceOf(CapacityError);
      expect(result).toMatchObject({ code: 'ETICKETCAPACITY', op: 'acquire' });
      expect((result as Error).cause).toMatchObject({ serverCode: 'capacity' });
    }
    expect(server.inspect('k')).toBeUndefined();
    squatter.destroy();
    await until(() => server.stats().connections === 0, 'the server to free the slot');
    expect((await c.acquire('k', { waitMs: 0, owner: 'o1' })).status).toBe('acquired');
  });
});
