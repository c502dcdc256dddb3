/**
 * What the server offers observers (an HTTP endpoint, a logger, metrics) without being woven
 * into them: the read-only queries `locks()` and `readiness()`, the `ticketing:server:expired`
 * channel, and `setSecret()` for a reload.
 */
import diagnostics from 'node:diagnostics_channel';
import { afterEach, describe, expect, test } from 'vitest';
import { TicketServer, type TicketServerOptions } from '../src/server/server.js';
import { LineSocket, sleep, startServer, tokenOf, until } from './helpers.js';

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

describe('locks(): the held keys, for an admin view', () => {
  test('holder, token, time left and waiters; filtered by prefix, cut at limit, expired keys left out', async () => {
    let now = 1_700_000_000_000;
    const { server: s, port } = await server({ leaseMs: 10_000, clock: () => now });
    const c = await connect(port);
    c.write('A orders/1 alice 0\nA orders/2 bob 0\nA users/1 carol 0\n');
    const tokens = [tokenOf(await c.readLine()), tokenOf(await c.readLine()), tokenOf(await c.readLine())];
    c.write('A orders/1 dave 60000\n');
    await until(() => s.stats().waiters === 1, 'the waiter', 5_000);
    now += 4_000;
    const holder = (owner: string, token: bigint | undefined) => [
      { owner, token, shared: false, slot: undefined, expiresInMs: 6_000, value: undefined },
    ];
    const lock = { kind: 'lock', permits: undefined };
    expect(s.locks({ prefix: 'orders/' })).toEqual([
      {
        key: 'orders/1',
        ...lock,
        rev: tokens[0],
        owner: 'alice',
        token: tokens[0],
        expiresInMs: 6_000,
        holders: holder('alice', tokens[0]),
        waiters: 1,
        waitersByMode: { x: 1 },
      },
      {
        key: 'orders/2',
        ...lock,
        rev: tokens[1],
        owner: 'bob',
        token: tokens[1],
        expiresInMs: 6_000,
        holders: holder('bob', tokens[1]),
        waiters: 0,
        waitersByMode: {},
      },
    ]);
    expect(s.locks({ limit: 1 }).map((l) => l.key)).toEqual(['orders/1']);
    expect(s.locks().map((l) => l.key)).toEqual(['orders/1', 'orders/2', 'users/1']);
    c.write(`R users/1 ${tokens[2]}\n`);
    expect(await c.readLine()).toBe(`R ${tokens[2]} users/1`);
    // orders/2 runs out (no waiters: lazily expired, not yet swept) and leaves the view.
    now += 6_000;
    expect(s.locks().map((l) => l.key)).toEqual([]);
    expect(() => s.locks({ limit: -1 })).toThrow(RangeError);
    // Modes: every holder with its slot or share, waiters by mode.
    c.write('A gpu a 0 2\nA gpu b 0 2\nA gpu c 60000 2\nA doc r1 0 s\nA doc r2 0 s\nA doc w 60000\n');
    await c.readLines(4);
    await until(() => s.locks({ prefix: 'doc' })[0]?.waiters === 1, 'the writer queued');
    const [gpu] = s.locks({ prefix: 'gpu' });
    const [doc] = s.locks({ prefix: 'doc' });
    expect(gpu).toMatchObject({ key: 'gpu', kind: 'semaphore', permits: 2, waiters: 1, waitersByMode: { 2: 1 } });
    expect(gpu!.holders.map((h) => [h.owner, h.slot])).toEqual([
      ['a', 0],
      ['b', 1],
    ]);
    expect(doc).toMatchObject({ key: 'doc', kind: 'lock', waiters: 1, waitersByMode: { x: 1 } });
    expect(doc!.holders.map((h) => [h.owner, h.shared])).toEqual([
      ['r1', true],
      ['r2', true],
    ]);
    expect(() => s.locks({ prefix: 1 as unknown as string })).toThrow(TypeError);
  });
});

describe('readiness()', () => {
  test('not ready before listening and once closing; ready while a single-mode server listens', async () => {
    const s = new TicketServer({ port: 0 });
    expect(s.readiness()).toEqual({ ready: false, reason: 'not listening' });
    await s.listen();
    expect(s.readiness()).toEqual({ ready: true });
    const closed = s.close();
    expect(s.readiness()).toEqual({ ready: false, reason: 'shutting down' });
    await closed;
  });
});

describe('ticketing:server:expired', () => {
  test('a lease that ran out without a release: key, owner and token, on takeover and on the sweep', async () => {
    const seen: Array<{ key: string; owner: string; token: bigint }> = [];
    const listener = (m: unknown): void => {
      const { key, owner, token } = m as { key: string; owner: string; token: bigint };
      seen.push({ key, owner, token });
    };
    diagnostics.subscribe('ticketing:server:expired', listener);
    cleanups.push(() => void diagnostics.unsubscribe('ticketing:server:expired', listener));
    let now = 1_700_000_000_000;
    const { port } = await server({ leaseMs: 1_000, sweepIntervalMs: 50, clock: () => now });
    const c = await connect(port);
    c.write('A taken alice 0\nA swept bob 0\n');
    const taken = tokenOf(await c.readLine());
    const swept = tokenOf(await c.readLine());
    await sleep(120); // sweeps that find nothing expired report nothing
    expect(seen).toEqual([]);
    now += 1_000;
    // Taken over by this acquire, or swept just before it: either way an expiry of alice's grant.
    c.write('A taken carol 0\n');
    expect(await c.readLine()).toMatch(/^A \d+ carol taken$/);
    await until(() => seen.length === 2, 'both expiries', 5_000);
    expect(seen.sort((a, b) => a.key.localeCompare(b.key))).toEqual([
      { key: 'swept', owner: 'bob', token: swept },
      { key: 'taken', owner: 'alice', token: taken },
    ]);
  });
});

describe('setSecret()', () => {
  test('new connections need the new secret; an open one stays authenticated', async () => {
    const { server: s, port } = await server({ secret: 'old-secret' });
    const open = await connect(port);
    open.write('H old-secret\nA k1 alice 0\n');
    expect(await open.readLine()).toMatch(/^A \d+ alice k1$/);
    s.setSecret('new-secret');
    const stale = await connect(port);
    stale.write('H old-secret\n');
    expect(await stale.readLine()).toBe('E auth_failed');
    const fresh = await connect(port);
    fresh.write('H new-secret\nA k2 bob 0\n');
    expect(await fresh.readLine()).toMatch(/^A \d+ bob k2$/);
    open.write('A k3 alice 0\n');
    expect(await open.readLine()).toMatch(/^A \d+ alice k3$/);
    expect(() => s.setSecret('has space')).toThrow(RangeError);
  });
});
