/**
 * `K` (keep) against the single-mode server over real sockets: every row of the keep table byte
 * for byte, keeps past the first lease, a kept key's waiter, malformed `K` lines, and the idle
 * timeout of a connection that keeps its grant.
 */
import { afterEach, describe, expect, test } from 'vitest';
import { TicketServer, type TicketServerOptions } from '../src/server/server.js';
import { LineSocket, sleep, startServer, tokenOf } from './helpers.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

async function server(options: TicketServerOptions = {}): Promise<{ server: TicketServer; port: number }> {
  const started = await startServer(options);
  cleanups.push(started.close);
  return started;
}

async function connect(port: number): Promise<LineSocket> {
  const socket = await LineSocket.connect(port);
  cleanups.push(() => socket.destroy());
  return socket;
}

describe('K: the keep table', () => {
  test('held under that token: "K <token> <key> <lease_ms>", the expiry moves to now + lease', async () => {
    const { port, server: s } = await server({ leaseMs: 30_000 });
    const c = await connect(port);
    c.write('A orders w1 0\n');
    const token = tokenOf(await c.readLine());
    const before = s.inspect('orders')!.expiresAt;
    await sleep(20);
    c.write(`K orders ${token}\n`);
    expect(await c.readLine()).toBe(`K ${token} orders 30000`);
    expect(s.inspect('orders')!.expiresAt).toBeGreaterThan(before);
    expect(s.inspect('orders')).toMatchObject({ owner: 'w1', token });
    expect(c.received.toString('latin1')).toBe(`A ${token} w1 orders\nK ${token} orders 30000\n`);
  });

  test('another token, an unknown key, a released key: "G <token> <key>", nothing changes', async () => {
    const { port, server: s } = await server();
    const c = await connect(port);
    c.write('A k o1 0\n');
    const token = tokenOf(await c.readLine());
    const view = s.inspect('k');
    c.write(`K k ${token + 1n}\nK nokey ${token}\n`);
    expect(await c.readLines(2)).toEqual([`G ${token + 1n} k`, `G ${token} nokey`]);
    expect(s.inspect('k')).toEqual(view);
    expect(s.inspect('nokey')).toBeUndefined();
    c.write(`R k ${token}\nK k ${token}\n`);
    expect(await c.readLines(2)).toEqual([`R ${token} k`, `G ${token} k`]);
    expect(s.inspect('k')).toBeUndefined();
  });

  test('expired but not yet swept: G (not revived), while R with the same token still gets R', async () => {
    const { port, server: s } = await server({ leaseMs: 100, sweepIntervalMs: 60_000 });
    const c = await connect(port);
    c.write('A k o1 0\n');
    const token = tokenOf(await c.readLine());
    await sleep(150);
    c.write(`K k ${token}\n`);
    expect(await c.readLine()).toBe(`G ${token} k`);
    expect(s.inspect('k')).toMatchObject({ token }); // still registered: nothing changed
    c.write(`R k ${token}\n`);
    expect(await c.readLine()).toBe(`R ${token} k`);
  });

  test('taken over after expiry: the old token gets G, the new one K', async () => {
    const { port } = await server({ leaseMs: 100 });
    const c = await connect(port);
    c.write('A k o1 0\n');
    const first = tokenOf(await c.readLine());
    await sleep(150);
    c.write('A k o2 0\n');
    const second = tokenOf(await c.readLine());
    c.write(`K k ${first}\nK k ${second}\n`);
    expect(await c.readLines(2)).toEqual([`G ${first} k`, `K ${second} k 100`]);
  });

  test('only the exact token counts, from any connection; the owner counts for nothing', async () => {
    const { port } = await server({ leaseMs: 400 });
    const holder = await connect(port);
    holder.write('A k same 0\n');
    const token = tokenOf(await holder.readLine());
    const other = await connect(port);
    other.write(`K k ${token}\nA k same 0\n`);
    expect(await other.readLines(2)).toEqual([`K ${token} k 400`, 'T same k']);
  });

  test('kept past its lease, three times over: others get T all along; released, the next gets it', async () => {
    // The server's clock is the test's: a keep every 100 ms against a 300 ms lease, however late
    // the test's own turns come.
    let now = 1_700_000_000_000;
    const { port, server: s } = await server({ leaseMs: 300, clock: () => now });
    const holder = await connect(port);
    const other = await connect(port);
    holder.write('A k h 0\n');
    const token = tokenOf(await holder.readLine());
    for (let i = 0; i < 9; i++) {
      now += 100;
      holder.write(`K k ${token}\n`);
      expect(await holder.readLine()).toBe(`K ${token} k 300`);
      expect(s.inspect('k')!.expiresAt).toBe(now + 300);
      other.write('A k o 0\n');
      expect(await other.readLine()).toBe('T o k');
    }
    holder.write(`R k ${token}\n`);
    expect(await holder.readLine()).toBe(`R ${token} k`);
    other.write('A k o 0\n');
    expect(tokenOf(await other.readLine())).toBeGreaterThan(token);
  });

  test('a kept key with a waiter: handed over only at the new expiry, the queue untouched', async () => {
    const { port, server: s } = await server({ leaseMs: 400 });
    const holder = await connect(port);
    const waiter = await connect(port);
    holder.write('A k h 0\n');
    const token = tokenOf(await holder.readLine());
    waiter.write('A k w 10000\n');
    await sleep(250);
    const queue = s.inspect('k')!.waiters;
    expect(queue.map((w) => w.owner)).toEqual(['w']);
    const keptAt = performance.now();
    holder.write(`K k ${token}\n`);
    expect(await holder.readLine()).toBe(`K ${token} k 400`);
    expect(s.inspect('k')!.waiters).toEqual(queue);
    const handed = await waiter.readLine(5_000);
    expect(handed).toMatch(/^A \d+ w k$/);
    // Not at the first lease's end (400 ms after the grant): a full lease after the keep.
    expect(performance.now() - keptAt).toBeGreaterThanOrEqual(400 - 5);
    holder.write(`K k ${token}\n`);
    expect(await holder.readLine()).toBe(`G ${token} k`);
  });

  test.each([
    ['K k', 'K takes 2 fields'],
    ['K k 1 2', 'K takes 2 fields'],
    ['K k 0', 'token must be'],
    ['K k 01', 'token must be'],
    ['K k -5', 'token must be'],
    ['K k 18446744073709551616', 'token must be'],
    [`K ${'k'.repeat(257)} 1`, 'key must be'],
    ['K k\u00e9 1', 'key must be'],
    ['K  1', 'key must be'],
  ])('%j: E bad_request, the connection closed, the grant unchanged', async (line, detail) => {
    const { port, server: s } = await server();
    const c = await connect(port);
    c.write('A k o 0\n');
    const token = tokenOf(await c.readLine());
    const view = s.inspect('k');
    c.write(Buffer.from(`${line}\nK k ${token}\n`, 'latin1'));
    const reply = await c.readLine();
    expect(reply.startsWith('E bad_request ')).toBe(true);
    expect(reply).toContain(detail);
    await c.waitClosed();
    expect(c.lines).toEqual([`A ${token} o k`, reply]); // the K after it was not processed
    expect(s.inspect('k')).toEqual(view);
  });

  test('pipelined keeps are answered in order, one line each', async () => {
    const { port } = await server();
    const c = await connect(port);
    c.write('A a o 0\nA b o2 0\n');
    const [ta, tb] = (await c.readLines(2)).map(tokenOf);
    c.write(`K a ${ta}\nK b ${tb}\nK a ${tb}\nK b ${ta}\nK a ${ta}\n`);
    expect(await c.readLines(5)).toEqual([
      `K ${ta} a 30000`,
      `K ${tb} b 30000`,
      `G ${tb} a`,
      `G ${ta} b`,
      `K ${ta} a 30000`,
    ]);
  });

  test("a connection that kept a grant is not cut while the kept lease runs; its idle time counts from the lease's end", async () => {
    const { port } = await server({ idleTimeoutMs: 300, leaseMs: 2_000 });
    const c = await connect(port);
    c.write('A k h 0\n');
    const token = tokenOf(await c.readLine());
    const grantedAt = performance.now();
    await sleep(1_000);
    c.write(`K k ${token}\n`);
    expect(await c.readLine()).toBe(`K ${token} k 2000`);
    // The grant's own lease ended at 2 s (cut by 2.3 s without the keep); the kept one at 3 s.
    await sleep(2_800 - (performance.now() - grantedAt));
    expect(c.closed).toBe(false);
    await c.waitClosed(5_000);
    expect(performance.now() - grantedAt).toBeGreaterThanOrEqual(3_000 + 300 - 1);
  });
});
