/**
 * The client against a scripted fake server that replies out of order, interleaves keys, sends
 * M/L/E/garbage/unmatched A, stalls and closes mid-reply. Every outcome is asserted; nothing may
 * be matched by position, and every ambiguous case must become Indeterminate.
 */
import diagnostics from 'node:diagnostics_channel';
import { once } from 'node:events';
import net from 'node:net';
import { afterEach, describe, expect, test } from 'vitest';
import { TicketClient, type TicketClientOptions } from '../src/client.js';
import {
  AuthFailedError,
  CapacityError,
  ClientClosedError,
  ConnectError,
  DuplicateRequestError,
  IndeterminateError,
  ProtocolError,
  ServerError,
} from '../src/errors.js';
import { FakeServer, sleep, until } from './helpers.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

async function fake(): Promise<FakeServer> {
  const server = new FakeServer();
  await server.listen();
  cleanups.push(() => server.close());
  return server;
}

function client(port: number, options: Partial<TicketClientOptions> = {}): TicketClient {
  const c = new TicketClient({ port, backoff: { initialMs: 10, maxMs: 50 }, ...options });
  cleanups.push(() => c.destroy());
  return c;
}

/** Settles a promise into a value or an error, for asserting on both. */
async function outcome<T>(promise: Promise<T>): Promise<T | Error> {
  try {
    return await promise;
  } catch (error) {
    return error as Error;
  }
}

function subscribe(channel: string): unknown[] {
  const seen: unknown[] = [];
  const listener = (message: unknown): void => void seen.push(message);
  diagnostics.subscribe(channel, listener);
  cleanups.push(() => void diagnostics.unsubscribe(channel, listener));
  return seen;
}

async function freePort(): Promise<number> {
  const s = net.createServer().listen(0, '127.0.0.1');
  await once(s, 'listening');
  const { port } = s.address() as net.AddressInfo;
  await new Promise((resolve) => s.close(resolve));
  return port;
}

describe('matching replies by (op, key, identifier), never by position', () => {
  test('out of order, interleaved keys, several requests on one key, lines split across chunks', async () => {
    const server = await fake();
    const c = client(server.port);
    const k1 = c.acquire('k', { waitMs: 5_000, owner: 'o1' });
    const k2 = c.acquire('k', { waitMs: 5_000, owner: 'o2' });
    const j1 = c.acquire('j', { waitMs: 0, owner: 'o1' });
    const k3 = c.acquire('k', { waitMs: 0, owner: 'o3' });
    const conn = await server.connection(0);
    expect(await conn.readLines(4)).toEqual(['A k o1 5000', 'A k o2 5000', 'A j o1 0', 'A k o3 0']);
    conn.write('T o3 k\nB o1 j\nA 7');
    await sleep(20);
    conn.write('7 o2 k\n');
    expect(await k3).toEqual({ status: 'timed-out', key: 'k', owner: 'o3' });
    expect(await j1).toEqual({ status: 'busy', key: 'j', owner: 'o1' });
    expect(await k2).toMatchObject({ status: 'acquired', key: 'k', owner: 'o2', token: 77n });
    conn.write('T o1 k\n');
    expect(await k1).toEqual({ status: 'timed-out', key: 'k', owner: 'o1' });
  });

  test('releases are matched by token; N is a value (not held), not an error', async () => {
    const server = await fake();
    const c = client(server.port);
    const r5 = c.release('k', 5n);
    const r6 = c.release('k', '6');
    const r7 = c.release('other', 7n);
    const lane = await server.connection(0);
    expect(await lane.readLines(3)).toEqual(['R k 5', 'R k 6', 'R other 7']);
    lane.write('N 6 k\nR 7 other\nR 5 k\n');
    expect(await r5).toEqual({ status: 'released', key: 'k', token: 5n });
    expect(await r6).toEqual({ status: 'not-held', key: 'k', token: 6n });
    expect(await r7).toEqual({ status: 'released', key: 'other', token: 7n });
  });

  test('acquires and releases travel on separate connections (the reserved release lane)', async () => {
    const server = await fake();
    const c = client(server.port);
    const a = c.acquire('k', { waitMs: 0, owner: 'o' });
    const acquireConn = await server.connection(0);
    expect(await acquireConn.readLine()).toBe('A k o 0');
    const r = c.release('k', 9n);
    const lane = await server.connection(1);
    expect(await lane.readLine()).toBe('R k 9');
    lane.write('R 9 k\n');
    acquireConn.write('A 10 o k\n');
    expect((await a).status).toBe('acquired');
    expect((await r).status).toBe('released');
    expect(acquireConn.lines).toEqual(['A k o 0']);
  });

  test('an immediate grant reports an expiry of about leaseMs from now', async () => {
    const server = await fake();
    const c = client(server.port, { leaseMs: 10_000 });
    const before = Date.now();
    const a = c.acquire('k', { waitMs: 0, owner: 'o' });
    const conn = await server.connection(0);
    await conn.readLine();
    conn.write('A 1 o k\n');
    const result = await a;
    const after = Date.now();
    if (result.status !== 'acquired') throw new Error('expected a grant');
    expect(result.expiresAt.getTime()).toBeGreaterThanOrEqual(before + 10_000 - 5);
    expect(result.expiresAt.getTime()).toBeLessThanOrEqual(after + 10_000);
  });

  test('a second pending acquire with the same (key, owner) is refused before it is sent', async () => {
    const server = await fake();
    const c = client(server.port);
    const first = c.acquire('k', { waitMs: 1_000, owner: 'dup' });
    await expect(c.acquire('k', { waitMs: 1_000, owner: 'dup' })).rejects.toBeInstanceOf(DuplicateRequestError);
    const other = c.acquire('other-key', { waitMs: 0, owner: 'dup' }); // another key is fine
    const conn = await server.connection(0);
    expect(await conn.readLines(2)).toEqual(['A k dup 1000', 'A other-key dup 0']);
    conn.write('T dup k\nT dup other-key\n');
    await first;
    await other;
    // Settled: the owner is free again.
    const again = c.acquire('k', { waitMs: 0, owner: 'dup' });
    expect(await conn.readLine()).toBe('A k dup 0');
    conn.write('T dup k\n');
    expect((await again).status).toBe('timed-out');
  });

  test('generated owners are unique per request', async () => {
    const server = await fake();
    const c = client(server.port);
    const all = Array.from({ length: 20 }, () => c.acquire('k', { waitMs: 0 }));
    const conn = await server.connection(0);
    const owners = (await conn.readLines(20)).map((l) => l.split(' ')[2]!);
    expect(new Set(owners).size).toBe(20);
    conn.write(owners.map((o) => `T ${o} k\n`).join(''));
    for (const p of all) expect((await p).status).toBe('timed-out');
  });

  test('a second release of the same (key, token) waits for the first, then can only be not-held', async () => {
    const server = await fake();
    const c = client(server.port);
    const first = c.release('k', 5n);
    const second = c.release('k', 5n);
    const lane = await server.connection(0);
    expect(await lane.readLine()).toBe('R k 5');
    await lane.expectSilence(100);
    lane.write('R 5 k\n');
    expect((await first).status).toBe('released');
    expect(await lane.readLine()).toBe('R k 5');
    lane.write('N 5 k\n');
    expect((await second).status).toBe('not-held');
  });

  test('a release waiting behind one of the same token can be aborted, or is refused by destroy()', async () => {
    const server = await fake();
    const c = client(server.port);
    const first = outcome(c.release('k', 5n));
    const controller = new AbortController();
    const second = outcome(c.release('k', 5n, { signal: controller.signal }));
    const third = outcome(c.release('k', 5n));
    const lane = await server.connection(0);
    expect(await lane.readLine()).toBe('R k 5');
    controller.abort(new Error('never mind'));
    expect(await second).toMatchObject({ message: 'never mind' });
    c.destroy();
    expect(await first).toMatchObject({ code: 'ETICKETINDETERMINATE', op: 'release', reason: 'destroyed' });
    expect(await third).toBeInstanceOf(ClientClosedError);
    expect(lane.lines).toEqual(['R k 5']);
  });

  test('the same owner may be pending on several keys; each reply finds its own', async () => {
    const server = await fake();
    const c = client(server.port);
    const a = c.acquire('a', { waitMs: 100, owner: 'shared' });
    const b = c.acquire('b', { waitMs: 100, owner: 'shared' });
    const cc = c.acquire('c', { waitMs: 100, owner: 'shared' });
    const conn = await server.connection(0);
    await conn.readLines(3);
    conn.write('T shared b\nA 9 shared c\nB shared a\n');
    expect((await a).status).toBe('busy');
    expect((await b).status).toBe('timed-out');
    expect(await cc).toMatchObject({ status: 'acquired', key: 'c', token: 9n });
  });
});

describe('B (busy)', () => {
  test('returns busy at once: no internal retry by default', async () => {
    const server = await fake();
    const c = client(server.port);
    const a = c.acquire('k', { waitMs: 5_000, owner: 'o' });
    const conn = await server.connection(0);
    await conn.readLine();
    conn.write('B o k\n');
    expect(await a).toEqual({ status: 'busy', key: 'k', owner: 'o' });
    await conn.expectSilence(150);
  });

  test("opt-in: retried with backoff inside the caller's wait budget (same owner, what is left of the wait)", async () => {
    const server = await fake();
    const c = client(server.port, { retryBusy: { initialMs: 20, maxMs: 40 } });
    const a = c.acquire('k', { waitMs: 5_000, owner: 'o' });
    const conn = await server.connection(0);
    expect(await conn.readLine()).toBe('A k o 5000');
    const bAt = Date.now();
    conn.write('B o k\n');
    const retry = await conn.readLine();
    expect(Date.now() - bAt).toBeGreaterThanOrEqual(8);
    const m = /^A k o (\d+)$/.exec(retry);
    expect(m).not.toBeNull();
    expect(Number(m![1])).toBeLessThan(5_000);
    expect(Number(m![1])).toBeGreaterThan(4_000);
    conn.write('A 3 o k\n');
    expect(await a).toMatchObject({ status: 'acquired', token: 3n });
  });

  test.each([
    [{ permits: 3 }, ' 3', 'A 3 o k 2', { slot: 2 }],
    [{ shared: true }, ' s', 'A 3 o k', {}],
  ])('a busy retry asks for the same mode (%o)', async (mode, field, granted, more) => {
    const server = await fake();
    const c = client(server.port, { retryBusy: { initialMs: 20, maxMs: 40 } });
    const a = c.acquire('k', { waitMs: 5_000, owner: 'o', ...mode });
    const conn = await server.connection(0);
    expect(await conn.readLine()).toBe(`A k o 5000${field}`);
    conn.write('B o k\n');
    expect(await conn.readLine()).toMatch(new RegExp(`^A k o \\d+${field}$`));
    conn.write(`${granted}\n`);
    expect(await a).toMatchObject({ status: 'acquired', token: 3n, ...more });
  });

  test('opt-in retry never outlives the wait budget: busy when no retry fits', async () => {
    const server = await fake();
    const c = client(server.port, { retryBusy: { initialMs: 50, maxMs: 100 } });
    const a = c.acquire('k', { waitMs: 10, owner: 'o' });
    const conn = await server.connection(0);
    await conn.readLine();
    conn.write('B o k\n');
    expect((await a).status).toBe('busy');
    await conn.expectSilence(100);
  });
});

describe('M, L and E', () => {
  test('M: an allowlisted leader is kept as the hint, the connection closes, sent acquires are Indeterminate, the next one goes to the leader', async () => {
    const server = await fake();
    const leader = await fake();
    const leaderAddress = `127.0.0.1:${leader.port}`;
    const c = client(server.port, { addresses: [leaderAddress] });
    const a = outcome(c.acquire('k', { waitMs: 0, owner: 'o' }));
    const conn = await server.connection(0);
    await conn.readLine();
    conn.write(`M ${leaderAddress}\n`);
    const error = await a;
    expect(error).toBeInstanceOf(IndeterminateError);
    expect(error).toMatchObject({
      code: 'ETICKETINDETERMINATE',
      op: 'acquire',
      key: 'k',
      owner: 'o',
      token: undefined,
      reason: 'connection-lost',
    });
    expect((error as Error).cause).toBeInstanceOf(ServerError);
    expect(c.leaderHint).toBe(leaderAddress);
    await conn.waitClosed();
    const b = c.acquire('k', { waitMs: 0, owner: 'o2' });
    const toLeader = await leader.connection(0);
    expect(await toLeader.readLine()).toBe('A k o2 0');
    toLeader.write('A 5 o2 k\n');
    expect((await b).status).toBe('acquired');
  });

  test('M to an address outside the allowlist is not kept (but still closes)', async () => {
    const server = await fake();
    const c = client(server.port, { addresses: ['127.0.0.1:1'] });
    const a = outcome(c.acquire('k', { waitMs: 0, owner: 'o' }));
    const conn = await server.connection(0);
    await conn.readLine();
    conn.write('M 203.0.113.9:7000\n');
    expect(await a).toBeInstanceOf(IndeterminateError);
    expect(c.leaderHint).toBeUndefined();
    await conn.waitClosed();
  });

  test('M outside the allowlist from the hinted node: the hint is dropped and the next listed address is tried', async () => {
    const primary = await fake();
    const other = await fake();
    const c = client(primary.port, { addresses: [`127.0.0.1:${other.port}`] });
    const a = outcome(c.acquire('k', { waitMs: 0, owner: 'o1' }));
    const conn = await primary.connection(0);
    await conn.readLine();
    conn.write(`L 127.0.0.1:${primary.port}\n`);
    await until(() => c.leaderHint === `127.0.0.1:${primary.port}`);
    conn.write('M 203.0.113.9:7000\n');
    expect(await a).toBeInstanceOf(IndeterminateError);
    await conn.waitClosed();
    expect(c.leaderHint).toBeUndefined();
    const b = c.acquire('k', { waitMs: 0, owner: 'o2' });
    const next = await other.connection(0);
    expect(await next.readLine()).toBe('A k o2 0');
    next.write('A 3 o2 k\n');
    expect((await b).status).toBe('acquired');
    expect(primary.connections.length).toBe(1);
  });

  test('an M after several failures still sends the next request to the leader it names', async () => {
    // Endpoints in order: primary, leader, q, s. Failures rotate through them once the hint is
    // spent; an M is a redirect, not a failure, so the leader is next whatever came before.
    const [primary, leader, q, s] = [await fake(), await fake(), await fake(), await fake()];
    const address = (f: FakeServer): string => `127.0.0.1:${f.port}`;
    const c = client(primary.port, {
      addresses: [address(leader), address(q), address(s)],
      errorBackoffMs: { not_active: 10 },
    });
    const first = outcome(c.acquire('k', { waitMs: 0, owner: 'o1' }));
    const p0 = await primary.connection(0);
    await p0.readLine();
    p0.write(`L ${address(primary)}\nE not_active\n`); // failure 1: back to the hinted primary
    expect(await first).toBeInstanceOf(IndeterminateError);
    const second = outcome(c.acquire('k', { waitMs: 0, owner: 'o2' }));
    const p1 = await primary.connection(1);
    await p1.readLine();
    p1.write('E not_active\n'); // failure 2: the hint is spent, rotate to endpoint 2 (q)
    expect(await second).toBeInstanceOf(IndeterminateError);
    const third = outcome(c.acquire('k', { waitMs: 0, owner: 'o3' }));
    const q0 = await q.connection(0);
    await q0.readLine();
    q0.write(`M ${address(leader)}\n`);
    expect(await third).toBeInstanceOf(IndeterminateError);
    expect(c.leaderHint).toBe(address(leader));
    const fourth = c.acquire('k', { waitMs: 0, owner: 'o4' });
    const l0 = await leader.connection(0);
    expect(await l0.readLine()).toBe('A k o4 0');
    l0.write('A 4 o4 k\n');
    expect((await fourth).status).toBe('acquired');
    expect(s.connections.length).toBe(0);
  });

  test('L: updates the hint (allowlisted only) and keeps the connection', async () => {
    const server = await fake();
    const c = client(server.port, { addresses: ['127.0.0.1:7001'] });
    const a = c.acquire('k', { waitMs: 0, owner: 'o' });
    const conn = await server.connection(0);
    await conn.readLine();
    conn.write('L 127.0.0.1:9999\nL 127.0.0.1:7001\nA 1 o k\n');
    expect((await a).status).toBe('acquired');
    expect(c.leaderHint).toBe('127.0.0.1:7001');
    const b = c.acquire('k', { waitMs: 0, owner: 'o' });
    expect(await conn.readLine()).toBe('A k o 0');
    conn.write('T o k\n');
    expect((await b).status).toBe('timed-out');
    expect(server.connections.length).toBe(1);
  });

  test.each(['no_leader', 'not_active'])(
    'E %s: close, sent acquires Indeterminate, back off, unsent requests go on the next connection',
    async (code) => {
      const server = await fake();
      const c = client(server.port, {
        addresses: [`127.0.0.1:${server.port}`],
        errorBackoffMs: { [code]: 300 },
      });
      const a = outcome(c.acquire('k', { waitMs: 0, owner: 'o' }));
      const conn = await server.connection(0);
      await conn.readLine();
      conn.write(`L 127.0.0.1:${server.port}\n`);
      await until(() => c.leaderHint !== undefined);
      conn.write(`E ${code} try later\n`);
      const error = await a;
      expect(error).toBeInstanceOf(IndeterminateError);
      expect((error as IndeterminateError).cause).toMatchObject({ serverCode: code, detail: 'try later' });
      const closedAt = Date.now();
      await conn.waitClosed();
      expect(c.leaderHint).toBe(code === 'no_leader' ? undefined : `127.0.0.1:${server.port}`);
      const b = c.acquire('k', { waitMs: 0, owner: 'o2' });
      const next = await server.connection(1);
      expect(Date.now() - closedAt).toBeGreaterThanOrEqual(250);
      expect(await next.readLine()).toBe('A k o2 0');
      next.write('A 2 o2 k\n');
      expect((await b).status).toBe('acquired');
    },
  );

  test.each([
    ['another E code', 'E bad_request what\n'],
    ['garbage', 'GARBAGE\n'],
    ['an unknown reply', 'Q 1 2\n'],
    ['a malformed A', 'A notanumber o k\n'],
    ['an oversized line', `${'x'.repeat(2_000)}\n`],
    ['binary bytes', '\u0000\u00ff\n'],
  ])('%s is fatal to the connection: every sent acquire becomes Indeterminate', async (_name, reply) => {
    const server = await fake();
    const indeterminate = subscribe('ticketing:client:indeterminate');
    const c = client(server.port);
    const a = outcome(c.acquire('k', { waitMs: 1_000, owner: 'o1' }));
    const b = outcome(c.acquire('j', { waitMs: 0, owner: 'o2' }));
    const conn = await server.connection(0);
    await conn.readLines(2);
    conn.write(reply);
    for (const result of [await a, await b]) {
      expect(result).toBeInstanceOf(IndeterminateError);
      expect(result).toMatchObject({ reason: 'connection-lost', token: undefined });
    }
    await conn.waitClosed();
    expect(indeterminate.length).toBe(2);
  });

  test.each([
    ['auth_failed', AuthFailedError, 'ETICKETAUTHFAILED'],
    ['capacity', CapacityError, 'ETICKETCAPACITY'],
  ] as const)(
    'E %s before any answer: a definite refusal of every sent request; the next request goes on a new connection after the backoff',
    async (code, type, errorCode) => {
      const server = await fake();
      const c = client(server.port, {
        addresses: [`127.0.0.1:${server.port}`],
        errorBackoffMs: { [code]: 300 },
      });
      const a = outcome(c.acquire('k', { waitMs: 0, owner: 'o' }));
      const r = outcome(c.release('k', 3n));
      const conn = await server.connection(0);
      const lane = await server.connection(1);
      await conn.readLine();
      await lane.readLine();
      conn.write(`L 127.0.0.1:${server.port}\n`); // not an answer: the refusal stays definite
      await until(() => c.leaderHint !== undefined);
      conn.write(`E ${code} go away\n`);
      lane.write(`E ${code}\n`);
      const error = await a;
      expect(error).toBeInstanceOf(type);
      expect(error).not.toBeInstanceOf(IndeterminateError);
      expect(error).toMatchObject({ code: errorCode, op: 'acquire', key: 'k', owner: 'o' });
      expect((error as Error).cause).toMatchObject({ serverCode: code, detail: 'go away' });
      expect(await r).toMatchObject({ code: errorCode, op: 'release', key: 'k', token: 3n });
      const closedAt = Date.now();
      await conn.waitClosed();
      const b = c.acquire('k', { waitMs: 0, owner: 'o2' });
      const next = await server.connection(2);
      expect(Date.now() - closedAt).toBeGreaterThanOrEqual(250);
      expect(await next.readLine()).toBe('A k o2 0');
      next.write('A 2 o2 k\n');
      expect((await b).status).toBe('acquired');
    },
  );

  test.each(['auth_failed', 'capacity'])(
    'E %s after an answer breaks the protocol: sent requests are Indeterminate',
    async (code) => {
      const server = await fake();
      const c = client(server.port);
      const a = c.acquire('j', { waitMs: 0, owner: 'o1' });
      const b = outcome(c.acquire('k', { waitMs: 1_000, owner: 'o2' }));
      const conn = await server.connection(0);
      await conn.readLines(2);
      conn.write(`T o1 j\nE ${code}\n`);
      expect((await a).status).toBe('timed-out');
      expect(await b).toBeInstanceOf(IndeterminateError);
    },
  );

  test('a reply nobody waits for closes the connection; an unmatched A is released by its exact token on the release lane', async () => {
    const server = await fake();
    const orphans = subscribe('ticketing:client:orphan-release');
    const c = client(server.port);
    const a = outcome(c.acquire('k', { waitMs: 1_000, owner: 'mine' }));
    const conn = await server.connection(0);
    await conn.readLine();
    conn.write('A 999 stranger k\n');
    const error = await a;
    expect(error).toBeInstanceOf(IndeterminateError);
    expect((error as Error).cause).toBeInstanceOf(ProtocolError);
    await conn.waitClosed();
    const lane = await server.connection(1);
    expect(await lane.readLine()).toBe('R k 999');
    lane.write('R 999 k\n');
    await until(() => orphans.length === 1);
    expect(orphans[0]).toMatchObject({ key: 'k', token: 999n, result: { status: 'released' } });
  });

  test('an unmatched T or N closes the connection without releasing anything', async () => {
    const server = await fake();
    const c = client(server.port);
    const a = outcome(c.acquire('k', { waitMs: 1_000, owner: 'mine' }));
    const conn = await server.connection(0);
    await conn.readLine();
    conn.write('T someone-else k\n');
    expect(await a).toBeInstanceOf(IndeterminateError);
    await conn.waitClosed();
    const r = outcome(c.release('k', 5n));
    const lane = await server.connection(1);
    await lane.readLine();
    lane.write('N 6 k\n');
    await lane.waitClosed();
    // The release's answer was lost with that connection: it goes out again on a new one.
    const again = await server.connection(2);
    expect(await again.readLine()).toBe('R k 5');
    again.write('R 5 k\n');
    expect(await r).toEqual({ status: 'released', key: 'k', token: 5n });
    await sleep(50);
    expect(server.connections.length).toBe(3);
  });
});

describe('stalls, drops and cancellation', () => {
  test('a stalled server: no reply within waitMs + responseTimeoutMs makes the request Indeterminate', async () => {
    const server = await fake();
    const c = client(server.port, { responseTimeoutMs: 200 });
    const started = Date.now();
    const a = outcome(c.acquire('k', { waitMs: 100, owner: 'o' }));
    const conn = await server.connection(0);
    await conn.readLine();
    const error = await a;
    expect(error).toMatchObject({ code: 'ETICKETINDETERMINATE', reason: 'response-timeout' });
    expect(Date.now() - started).toBeGreaterThanOrEqual(280);
    await conn.waitClosed();
  });

  test('closed in the middle of a grant: Indeterminate with the token, and an exact-token release on the lane', async () => {
    const server = await fake();
    const c = client(server.port);
    const a = outcome(c.acquire('key', { waitMs: 0, owner: 'o1' }));
    const b = outcome(c.acquire('other', { waitMs: 0, owner: 'o2' }));
    const conn = await server.connection(0);
    await conn.readLines(2);
    conn.write('A 4242 o1 ke');
    await sleep(30);
    conn.destroy();
    expect(await a).toMatchObject({
      code: 'ETICKETINDETERMINATE',
      key: 'key',
      owner: 'o1',
      token: 4242n,
      reason: 'connection-lost',
    });
    expect(await b).toMatchObject({ code: 'ETICKETINDETERMINATE', key: 'other', owner: 'o2', token: undefined });
    const lane = await server.connection(1);
    expect(await lane.readLine()).toBe('R key 4242');
  });

  test('closed before the token was complete: Indeterminate without a token, nothing released', async () => {
    const server = await fake();
    const c = client(server.port);
    const a = outcome(c.acquire('key', { waitMs: 0, owner: 'o1' }));
    const conn = await server.connection(0);
    await conn.readLine();
    conn.write('A 42');
    await sleep(30);
    conn.destroy();
    expect(await a).toMatchObject({ code: 'ETICKETINDETERMINATE', token: undefined });
    await sleep(100);
    expect(server.connections.length).toBe(1);
  });

  test("aborted before it was sent: rejected with the signal's reason, nothing sent", async () => {
    const server = await fake();
    const c = client(server.port);
    const controller = new AbortController();
    const a = outcome(c.acquire('k', { waitMs: 0, owner: 'o', signal: controller.signal }));
    controller.abort(new Error('changed my mind'));
    expect(await a).toMatchObject({ message: 'changed my mind' });
    const conn = await server.connection(0);
    await sleep(100);
    expect(conn.lines).toEqual([]); // the probe (answered by the fake) and nothing else
    await expect(c.acquire('k', { waitMs: 0, signal: AbortSignal.abort() })).rejects.toMatchObject({
      name: 'AbortError',
    });
  });

  test('aborted after it was sent: the connection is closed; it and every other sent request become Indeterminate', async () => {
    const server = await fake();
    const c = client(server.port);
    const controller = new AbortController();
    const a = outcome(c.acquire('k', { waitMs: 10_000, owner: 'o1', signal: controller.signal }));
    const b = outcome(c.acquire('j', { waitMs: 10_000, owner: 'o2' }));
    const conn = await server.connection(0);
    await conn.readLines(2);
    const reason = new Error('user gave up');
    controller.abort(reason);
    const aborted = await a;
    expect(aborted).toMatchObject({ code: 'ETICKETINDETERMINATE', reason: 'aborted', key: 'k', owner: 'o1' });
    expect((aborted as Error).cause).toBe(reason);
    expect(await b).toMatchObject({ code: 'ETICKETINDETERMINATE', reason: 'connection-lost', key: 'j' });
    await conn.waitClosed();
    // Never re-sent as a status query: the next connection carries only new requests.
    const next = c.acquire('k', { waitMs: 0, owner: 'o3' });
    const conn2 = await server.connection(1);
    expect(await conn2.readLine()).toBe('A k o3 0');
    conn2.write('T o3 k\n');
    await next;
    expect(conn2.lines).toEqual(['A k o3 0']);
  });

  test('reconnects with backoff; requests wait (unsent) for the connection', async () => {
    const port = await freePort();
    const closes = subscribe('ticketing:client:close') as Array<{ backoffMs: number }>;
    const c = client(port, { backoff: { initialMs: 40, maxMs: 200 }, connectTimeoutMs: 10_000 });
    const a = c.acquire('k', { waitMs: 0, owner: 'o' });
    await until(() => closes.length >= 3, 'three refused connects', 5_000);
    // Exponential: the delays grow (each is at least half its nominal value).
    expect(closes[2]!.backoffMs).toBeGreaterThanOrEqual(closes[0]!.backoffMs);
    expect(closes[2]!.backoffMs).toBeGreaterThanOrEqual(80);
    const server = new FakeServer();
    server.server.listen(port, '127.0.0.1');
    await once(server.server, 'listening');
    cleanups.push(() => server.close());
    const conn = await server.connection(0);
    expect(await conn.readLine()).toBe('A k o 0');
    conn.write('A 1 o k\n');
    expect((await a).status).toBe('acquired');
  });

  test('no connection within connectTimeoutMs: ConnectError (the request was never sent)', async () => {
    const port = await freePort();
    const c = client(port, { connectTimeoutMs: 300 });
    const error = await outcome(c.acquire('k', { waitMs: 0 }));
    expect(error).toBeInstanceOf(ConnectError);
    expect((error as Error).cause).toMatchObject({ code: 'ECONNREFUSED' });
  });

  test('a secret is sent as the first line of every connection', async () => {
    const server = await fake();
    const c = client(server.port, { secret: 's3cret' });
    const a = c.acquire('k', { waitMs: 0, owner: 'o' });
    const r = c.release('k', 1n);
    const [first, second] = [await server.connection(0), await server.connection(1)];
    const lines = [await first.readLines(2), await second.readLines(2)].sort();
    expect(lines).toEqual([
      ['H s3cret', 'A k o 0'],
      ['H s3cret', 'R k 1'],
    ]);
    first.write(first.lines[1]!.startsWith('A') ? 'A 1 o k\n' : 'R 1 k\n');
    second.write(second.lines[1]!.startsWith('A') ? 'A 1 o k\n' : 'R 1 k\n');
    await a;
    await r;
  });
});

describe('closing and validation', () => {
  test('close(): unsent requests are refused, those in flight settle first', async () => {
    const server = await fake();
    const c = client(server.port);
    const inFlight = c.acquire('k', { waitMs: 1_000, owner: 'o' });
    const conn = await server.connection(0);
    await conn.readLine();
    const closing = c.close();
    await expect(c.acquire('k', { waitMs: 0 })).rejects.toBeInstanceOf(ClientClosedError);
    await sleep(50);
    conn.write('A 3 o k\n');
    expect((await inFlight).status).toBe('acquired');
    await closing;
    await conn.waitClosed();
  });

  test('destroy(): requests in flight become Indeterminate at once', async () => {
    const server = await fake();
    const c = client(server.port);
    const inFlight = outcome(c.acquire('k', { waitMs: 1_000, owner: 'o' }));
    await (await server.connection(0)).readLine();
    c.destroy();
    expect(await inFlight).toMatchObject({ code: 'ETICKETINDETERMINATE', reason: 'destroyed' });
  });

  test('acquire(key) with no options is a try-lock: waitMs defaults to 0', async () => {
    const server = await fake();
    const c = client(server.port, { ownerPrefix: 'me' });
    const a = c.acquire('k');
    const b = c.acquire('j', {});
    const conn = await server.connection(0);
    expect(await conn.readLines(2)).toEqual(['A k me-0 0', 'A j me-1 0']);
    conn.write('T me-0 k\nA 9 me-1 j\n');
    expect(await a).toEqual({ status: 'timed-out', key: 'k', owner: 'me-0' });
    expect(await b).toMatchObject({ status: 'acquired', key: 'j', owner: 'me-1', token: 9n });
  });

  test('arguments are validated up front (TypeError / RangeError), before anything is sent', async () => {
    const server = await fake();
    const c = client(server.port);
    await expect(c.acquire('has space', { waitMs: 0 })).rejects.toBeInstanceOf(RangeError);
    await expect(c.acquire('k'.repeat(257), { waitMs: 0 })).rejects.toBeInstanceOf(RangeError);
    await expect(c.acquire(5 as unknown as string, { waitMs: 0 })).rejects.toBeInstanceOf(TypeError);
    await expect(c.acquire('k', null as never)).rejects.toBeInstanceOf(TypeError);
    await expect(c.acquire('k', { waitMs: '5' as never })).rejects.toBeInstanceOf(TypeError);
    await expect(c.acquire('k', { waitMs: -1 })).rejects.toBeInstanceOf(RangeError);
    await expect(c.acquire('k', { waitMs: 1.5 })).rejects.toBeInstanceOf(RangeError);
    await expect(c.acquire('k', { waitMs: 0, owner: '' })).rejects.toBeInstanceOf(RangeError);
    await expect(c.acquire('k', { waitMs: 0, signal: {} as AbortSignal })).rejects.toBeInstanceOf(TypeError);
    await expect(c.release('k', 0n)).rejects.toBeInstanceOf(RangeError);
    await expect(c.release('k', '007')).rejects.toBeInstanceOf(RangeError);
    await expect(c.release('k', 5 as unknown as bigint)).rejects.toBeInstanceOf(TypeError);
    expect(() => new TicketClient({})).toThrow(TypeError);
    expect(() => new TicketClient({ port: 0 })).toThrow(RangeError);
    expect(() => new TicketClient({ port: 1, secret: 'a b' })).toThrow(RangeError);
    expect(() => new TicketClient({ port: 1, addresses: ['nope'] })).toThrow(RangeError);
    expect(() => new TicketClient({})).toThrow(new TypeError('give port (one server) or addresses'));
    expect(() => new TicketClient({ addresses: '127.0.0.1:1' as never })).toThrow(TypeError);
    expect(() => new TicketClient({ port: 1, backoff: { initialMs: 100, maxMs: 10 } })).toThrow(RangeError);
    await sleep(50);
    expect(server.connections.length).toBe(0);
  });
});
