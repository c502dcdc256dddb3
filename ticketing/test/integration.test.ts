/** The client against the real server: FIFO hand-off one holder at a time, fencing, expiry,
 * auth and draining, end to end over loopback. */
import diagnostics from 'node:diagnostics_channel';
import { afterEach, describe, expect, test } from 'vitest';
import { TicketClient, type AcquireResult } from '../src/client.js';
import { TicketServer } from '../src/server/server.js';
import { sleep, startServer, until } from './helpers.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

async function setup(options: Parameters<typeof startServer>[0] = {}, clientCount = 1, clientOptions: object = {}) {
  const started = await startServer(options);
  cleanups.push(started.close);
  const clients = Array.from({ length: clientCount }, () => {
    const c = new TicketClient({ port: started.port, leaseMs: options.leaseMs ?? 30_000, ...clientOptions });
    cleanups.push(() => c.destroy());
    return c;
  });
  return { ...started, clients };
}

/** A guarded resource: it accepts a write only with a token greater than every one it saw, and
 * counts how many holders are inside at once. */
class FencedResource {
  lastToken = 0n;
  inside = 0;
  maxInside = 0;
  rejected = 0;
  async use(token: bigint, holdMs: number): Promise<void> {
    if (token <= this.lastToken) {
      this.rejected++;
      return;
    }
    this.lastToken = token;
    this.inside++;
    this.maxInside = Math.max(this.maxInside, this.inside);
    await sleep(holdMs);
    this.inside--;
  }
}

function grant(result: AcquireResult): bigint {
  if (result.status !== 'acquired') throw new Error(`expected a grant, got ${result.status}`);
  return result.token;
}

describe('client and server together', () => {
  test('many concurrent acquirers on one key get it one at a time, in FIFO order, on release', async () => {
    const { clients, server } = await setup({}, 4);
    const resource = new FencedResource();
    const first = grant(await clients[0]!.acquire('hot', { waitMs: 0 }));
    // Queue 24 acquirers across four connections, each one surely behind the previous.
    const order: number[] = [];
    const done: Array<Promise<void>> = [];
    for (let i = 0; i < 24; i++) {
      const c = clients[i % 4]!;
      done.push(
        c.acquire('hot', { waitMs: 30_000, owner: `w${i}` }).then(async (result) => {
          const token = grant(result);
          order.push(i);
          await resource.use(token, 2);
          expect((await c.release('hot', token)).status).toBe('released');
        }),
      );
      await until(() => server.inspect('hot')?.waiters.length === i + 1);
    }
    expect(order).toEqual([]);
    await clients[0]!.release('hot', first);
    await Promise.all(done);
    expect(order).toEqual(Array.from({ length: 24 }, (_, i) => i));
    expect(resource.maxInside).toBe(1);
    expect(resource.rejected).toBe(0);
    expect(server.inspect('hot')).toBeUndefined();
  });

  test('a fencing check under contention: never two holders, tokens only grow', async () => {
    const { clients } = await setup({}, 3);
    const resource = new FencedResource();
    let cycles = 0;
    const worker = async (i: number): Promise<void> => {
      const c = clients[i % 3]!;
      for (let n = 0; n < 8; n++) {
        const token = grant(await c.acquire('contended', { waitMs: 30_000 }));
        await resource.use(token, Math.random() < 0.5 ? 0 : 1);
        await c.release('contended', token);
        cycles++;
      }
    };
    await Promise.all(Array.from({ length: 30 }, (_, i) => worker(i)));
    expect(cycles).toBe(240);
    expect(resource.maxInside).toBe(1);
    expect(resource.rejected).toBe(0);
  });

  test("a holder that outlives its lease is fenced off: the next holder's token wins", async () => {
    const { clients } = await setup({ leaseMs: 150 }, 2);
    const resource = new FencedResource();
    const stale = grant(await clients[0]!.acquire('k', { waitMs: 0 }));
    const successor = grant(await clients[1]!.acquire('k', { waitMs: 5_000 })); // handed over at the expiry
    expect(successor > stale).toBe(true);
    await resource.use(successor, 0);
    await resource.use(stale, 0); // the sleepy holder wakes up and tries to write
    expect(resource.rejected).toBe(1);
    expect((await clients[0]!.release('k', stale)).status).toBe('not-held');
    expect((await clients[1]!.release('k', successor)).status).toBe('released');
  });

  test('with a shared secret', async () => {
    const { clients } = await setup({ secret: 'tr0ub4dor' }, 1, { secret: 'tr0ub4dor' });
    const token = grant(await clients[0]!.acquire('k', { waitMs: 0 }));
    expect((await clients[0]!.release('k', token)).status).toBe('released');
  });

  test('a draining server answers queued acquires T (definitive), not Indeterminate', async () => {
    const { clients, server } = await setup({}, 1);
    grant(await clients[0]!.acquire('k', { waitMs: 0 }));
    const waiting = clients[0]!.acquire('k', { waitMs: 30_000 });
    await until(() => server.inspect('k')?.waiters.length === 1);
    await server.close();
    expect((await waiting).status).toBe('timed-out');
  });

  test('a client rides out a server restart on the same port: drain answers, back off, reconnect', async () => {
    const first = new TicketServer({ port: 0 });
    const { port } = await first.listen();
    const c = new TicketClient({ port, errorBackoffMs: { not_active: 100 }, backoff: { initialMs: 20, maxMs: 200 } });
    cleanups.push(() => c.destroy());
    const before = grant(await c.acquire('k', { waitMs: 0 }));
    const waiting = c.acquire('k', { waitMs: 30_000 });
    await until(() => first.inspect('k')?.waiters.length === 1);
    await first.close();
    expect((await waiting).status).toBe('timed-out');
    const second = new TicketServer({ port });
    await second.listen();
    cleanups.push(() => second.close());
    // The restarted server remembers no holder, and issues greater tokens.
    const after = grant(await c.acquire('k', { waitMs: 0 }));
    expect(after > before).toBe(true);
    expect((await c.release('k', before)).status).toBe('not-held');
    expect((await c.release('k', after)).status).toBe('released');
  });

  test('throughput sanity: 2000 pipelined cycles over one client', async () => {
    const { clients } = await setup({}, 1);
    const c = clients[0]!;
    await Promise.all(
      Array.from({ length: 50 }, async (_, i) => {
        for (let n = 0; n < 40; n++) {
          const token = grant(await c.acquire(`k${i}`, { waitMs: 0 }));
          expect((await c.release(`k${i}`, token)).status).toBe('released');
        }
      }),
    );
    expect(c.pending).toEqual({ inFlight: 0, queued: 0 });
  });

  test('the server closing an idle connection is ordinary: the next request reconnects at once, no error', async () => {
    const indeterminate: unknown[] = [];
    const listener = (m: unknown): void => void indeterminate.push(m);
    diagnostics.subscribe('ticketing:client:indeterminate', listener);
    cleanups.push(() => void diagnostics.unsubscribe('ticketing:client:indeterminate', listener));
    // A backoff longer than the connect timeout: a reconnect that counted the idle close as a
    // failure would reject the next request with ConnectError.
    const { server, clients } = await setup({ idleTimeoutMs: 200, leaseMs: 300 }, 1, {
      backoff: { initialMs: 5_000, maxMs: 5_000 },
      connectTimeoutMs: 1_000,
    });
    const c = clients[0]!;
    for (let round = 0; round < 3; round++) {
      const token = grant(await c.acquire('k', { waitMs: 0 }));
      expect((await c.release('k', token)).status).toBe('released');
      await until(() => server.stats().connections === 0, 'the idle connections to be cut', 5_000);
    }
    expect(indeterminate).toEqual([]);
  });
});
