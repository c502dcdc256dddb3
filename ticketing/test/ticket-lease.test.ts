/** TicketLease against flocklease's exported conformance suite, over a real server (short lease,
 * real clock). The cases this protocol cannot meet are skipped by name, each for the reason
 * docs/ticketing-client.md "TicketLease" gives. */
import { afterAll, beforeAll, describe, test } from 'vitest';
import { conformanceCases } from '../../src/conformance/index.js';
import type { SessionLease } from '../../src/port/types.js';
import { TicketClient } from '../src/client.js';
import { TicketLease } from '../src/ticket-lease.js';
import { sleep, startServer } from './helpers.js';

const ttlMs = 1_000;
const SKIPS = {
  'a same-owner re-acquire keeps the token':
    'an owner is a request identifier, not a holder identity: a second acquire waits or times out like any other',
  'renew after a bare expiry reclaims the lease: same token, fresh expiry':
    'the server forgets an expired grant: a keep after the lease answers G, and the key is free for the next acquire',
  'release is idempotent: unknown, stale, mismatched and repeated releases change nothing':
    'a release names the token only: "right token, wrong owner" releases the grant (the rest of this case is covered below)',
};

describe('TicketLease: the SessionLease port over a real server', () => {
  let server: Awaited<ReturnType<typeof startServer>>;
  const clients: TicketClient[] = [];
  beforeAll(async () => {
    server = await startServer({ leaseMs: ttlMs });
  });
  afterAll(async () => {
    for (const c of clients) c.destroy();
    await server.close();
  });
  let n = 0;
  const cases = conformanceCases({
    ttlMs,
    skip: SKIPS,
    create: (): SessionLease => {
      const client = new TicketClient({ port: server.port, leaseMs: ttlMs, ownerPrefix: `case${n++}` });
      clients.push(client);
      // Every case uses its own keys: prefix them so that concurrent cases do not meet.
      const lease = new TicketLease(client);
      const prefix = `c${n}-`;
      const key = (id: string): string => (id === '' || typeof id !== 'string' ? id : prefix + id);
      const unkey = <G extends { sessionId: string }>(g: G): G =>
        Object.freeze({ ...g, sessionId: g.sessionId.slice(prefix.length) });
      return {
        acquire: async (id, owner, options) => unkey(await lease.acquire(key(id), owner, options)),
        renew: async (grant) => unkey(await lease.renew(rekey(grant))),
        release: (grant) => lease.release(rekey(grant)),
      };
      function rekey<G>(grant: G): G {
        if (typeof grant !== 'object' || grant === null) return grant;
        const g = grant as { sessionId?: unknown };
        return typeof g.sessionId === 'string' ? { ...grant, sessionId: key(g.sessionId) } : grant;
      }
    },
    advance: (ms) => sleep(ms),
  });
  for (const c of cases) {
    if (c.skipped !== undefined) test.skip(`${c.name} (skipped: ${c.skipped})`, () => {});
    else test.concurrent(c.name, () => c.run());
  }

  test('release: unknown, repeated and stale releases change nothing', async () => {
    const client = new TicketClient({ port: server.port, leaseMs: ttlMs });
    clients.push(client);
    const lease = new TicketLease(client);
    await lease.release({ sessionId: 'idem-never', owner: 'alice', token: 42n, expiry: new Date() });
    const first = await lease.acquire('idem', 'alice');
    await lease.release(first);
    await lease.release(first);
    const second = await lease.acquire('idem', 'bob');
    await lease.release(first);
    await lease.release({ ...second, token: second.token + 1n });
    const renewed = await lease.renew(second);
    if (renewed.token !== second.token) throw new Error('bob lost his token');
    await lease.release(second);
  });
});
