/** The console's server side over real HTTP: the page and its headers, /v1/auth, /v1/node, and
 * the event stream (snapshot, changes, coalescing, prefix, bounds, a replaced secret). The page
 * itself in a browser: console-browser.test.ts. */
import { gzipSync } from 'node:zlib';
import { afterEach, describe, expect, test } from 'vitest';
import { TicketClient } from '../../src/client.js';
import { LockRows } from '../../src/observe/lock-rows.js';
import { LockStream, type StreamOutput } from '../../src/observe/lock-stream.js';
import { TicketServer } from '../../src/server/server.js';
import { until } from '../helpers.js';
import { openEvents, type EventReader } from './sse.js';
import { request, startObserved, type Observed } from './support.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

async function observed(...args: Parameters<typeof startObserved>): Promise<Observed> {
  const o = await startObserved(...args);
  cleanups.push(() => o.close());
  return o;
}

function client(port: number, secret?: string): TicketClient {
  const c = new TicketClient({ port, secret });
  cleanups.push(() => c.destroy());
  return c;
}

async function events(port: number, path?: string, headers?: Record<string, string>): Promise<EventReader> {
  const reader = await openEvents(port, path, headers);
  cleanups.push(() => reader.close());
  return reader;
}

async function acquired(c: TicketClient, key: string, owner?: string): Promise<bigint> {
  const r = await c.acquire(key, { owner });
  if (r.status !== 'acquired') throw new Error(`${key}: ${r.status}`);
  return r.token;
}

type Row = { key: string; kind: string; holders: Array<{ owner: string; token: string; expiresInMs: number }> };

describe('the console page', () => {
  test('/ and its files: a strict CSP, nosniff, only same-origin files, under 100 KB', async () => {
    const o = await observed();
    const page = await request(o.httpPort, '/');
    expect(page.status).toBe(200);
    expect(page.headers['content-type']).toBe('text/html; charset=utf-8');
    const csp = page.headers['content-security-policy'] ?? '';
    expect(csp).toMatch(/default-src 'none'/);
    expect(csp).toMatch(/script-src 'self'(;|$)/);
    expect(csp).not.toMatch(/unsafe-inline|unsafe-eval|https?:|data:/);
    expect(page.headers['x-content-type-options']).toBe('nosniff');
    expect(page.body).not.toMatch(/<script(?![^>]*\bsrc=)/); // no inline script
    expect(page.body).not.toMatch(/\sstyle=|\son\w+=/); // no inline style or handler
    let bytes = Buffer.byteLength(page.body);
    let gzipped = gzipSync(page.body).length;
    const referenced = [...page.body.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!);
    expect(referenced.every((ref) => ref.startsWith('/console/'))).toBe(true);
    const files = new Set(referenced);
    // The modules the entry imports, followed transitively.
    for (const file of files) {
      const asset = await request(o.httpPort, file);
      expect(asset.status, file).toBe(200);
      expect(asset.headers['content-security-policy']).toBe(csp);
      bytes += Buffer.byteLength(asset.body);
      gzipped += gzipSync(asset.body).length;
      if (file.endsWith('.js'))
        for (const [, name] of asset.body.matchAll(/from '\.\/([\w-]+\.js)'/g)) files.add(`/console/${name}`);
    }
    expect(files.size).toBeGreaterThan(4);
    expect(bytes).toBeLessThan(100 * 1024);
    console.log(`console page: ${files.size + 1} files, ${bytes} bytes as served (${gzipped} gzipped)`);
    expect((await request(o.httpPort, '/console/nope.js')).status).toBe(404);
    expect((await request(o.httpPort, '/', { method: 'POST' })).status).toBe(405);
  });

  test('/v1/auth says whether the credentials open the console; /v1/node needs them', async () => {
    const o = await observed({ secret: 's3cret', leaseMs: 5_000 });
    const auth = async (headers: Record<string, string>) =>
      JSON.parse((await request(o.httpPort, '/v1/auth', { headers })).body) as unknown;
    expect(await auth({})).toEqual({ authorized: false });
    expect(await auth({ authorization: 'Bearer wrong' })).toEqual({ authorized: false });
    expect(await auth({ authorization: 'Bearer s3cret' })).toEqual({ authorized: true });
    expect((await request(o.httpPort, '/v1/node')).status).toBe(401);
    const c = client(o.port, 's3cret');
    await acquired(c, 'a');
    const answer = await request(o.httpPort, '/v1/node', { headers: { authorization: 'Bearer s3cret' } });
    expect(answer.status).toBe(200);
    const node = JSON.parse(answer.body) as Record<string, unknown>;
    expect(node).toMatchObject({ role: 'single', ready: true, connections: 1, keys: 1, waiters: 0, leaseMs: 5_000 });
    expect(node).not.toHaveProperty('leader');
    expect(node.requestsPerSecond).toHaveLength(300);
  });
});

describe('GET /v1/locks/events', () => {
  test('the secret as /v1/locks wants it; bad queries 400', async () => {
    const o = await observed({ secret: 's3cret' });
    expect((await events(o.httpPort)).status).toBe(401);
    expect((await events(o.httpPort, undefined, { authorization: 'Bearer nope' })).status).toBe(401);
    const ok = await events(o.httpPort, undefined, { authorization: 'Bearer s3cret' });
    expect(ok.status).toBe(200);
    for (const query of ['limit=1', 'prefix=a&prefix=b', `prefix=${'x'.repeat(257)}`]) {
      const bad = await request(o.httpPort, `/v1/locks/events?${query}`, {
        headers: { authorization: 'Bearer s3cret' },
      });
      expect(bad.status, query).toBe(400);
      expect(bad.headers['content-type']).toBe('application/json');
    }
  });

  test('a snapshot first, then what changed: grants, waiters, releases; a prefix narrows both', async () => {
    const o = await observed({ leaseMs: 30_000 });
    const c = client(o.port);
    const token = await acquired(c, 'orders/1', 'worker-a');
    await acquired(c, 'users/1', 'worker-u');
    const all = await events(o.httpPort);
    const orders = await events(o.httpPort, '/v1/locks/events?prefix=orders/');
    const snapshot = (await all.next()).data;
    expect(all.events[0]!.event).toBe('snapshot');
    expect(snapshot).toMatchObject({ prefix: '', truncated: false, node: { role: 'single', ready: true } });
    const rows = snapshot.keys as Row[];
    expect(rows.map((r) => r.key)).toEqual(['orders/1', 'users/1']);
    expect(rows[0]).toMatchObject({
      kind: 'lock',
      waiters: 0,
      queue: [],
      holders: [{ owner: 'worker-a', token: String(token) }],
    });
    expect(rows[0]!.holders[0]!.expiresInMs).toBeGreaterThan(20_000);
    expect(((await orders.next('snapshot')).data.keys as Row[]).map((r) => r.key)).toEqual(['orders/1']);

    const waiting = client(o.port).acquire('orders/1', { owner: 'worker-b', waitMs: 10_000 });
    expect((await all.next('keys')).data).toMatchObject({
      upsert: [{ key: 'orders/1', waiters: 1, queue: ['worker-b'] }],
      remove: [],
    });
    await c.release('orders/1', token);
    await waiting;
    expect((await all.next('keys')).data).toMatchObject({
      upsert: [{ key: 'orders/1', waiters: 0, holders: [{ owner: 'worker-b' }] }],
    });
    await acquired(c, 'users/2', 'worker-u');
    expect((await all.next('keys')).data).toMatchObject({ upsert: [{ key: 'users/2' }] });
    const u1 = rows[1]!.holders[0]!.token;
    await c.release('users/1', BigInt(u1));
    expect((await all.next('keys')).data).toMatchObject({ upsert: [], remove: ['users/1'] });
    // The orders/ stream saw only orders/1's changes.
    const seen = orders.events
      .filter((e) => e.event === 'keys')
      .flatMap((e) => (e.data.upsert as Row[]).map((r) => r.key));
    expect(new Set(seen)).toEqual(new Set(['orders/1']));
    // A node event every second.
    expect((await all.next('node', 2_000)).data).toMatchObject({ role: 'single', keys: 2, waiters: 0 });
  });

  test('a hot key is sent once per flush, not once per change', async () => {
    const o = await observed();
    const c = client(o.port);
    const stream = await events(o.httpPort);
    await stream.next('snapshot');
    const started = Date.now();
    const cycles = 300;
    for (let i = 0; i < cycles; i++) {
      const token = await acquired(c, 'hot');
      await c.release('hot', token);
    }
    await acquired(c, 'hot', 'last');
    const elapsedMs = Date.now() - started;
    const last = (e: (typeof stream.events)[number]): boolean =>
      e.event === 'keys' && (e.data.upsert as Row[]).some((r) => r.holders[0]!.owner === 'last');
    await until(() => stream.events.some(last), 'the last change', 3_000);
    const changes = stream.events.filter((e) => e.event === 'keys').length;
    // One event per 200 ms flush at most (and the last one), however many changes.
    expect(changes).toBeLessThanOrEqual(Math.ceil(elapsedMs / 200) + 2);
    expect(changes).toBeLessThan(cycles / 4);
  });

  test('streams are bounded (503 past 8); one outlives the request timeout; a replaced secret ends it', async () => {
    const o = await observed({ secret: 'one' }, { requestTimeoutMs: 300 });
    const auth = { authorization: 'Bearer one' };
    const open = await Promise.all(Array.from({ length: 8 }, () => events(o.httpPort, undefined, auth)));
    expect(open.map((s) => s.status)).toEqual(Array(8).fill(200));
    const refused = await request(o.httpPort, '/v1/locks/events', { headers: auth });
    expect(refused.status).toBe(503);
    expect(JSON.parse(refused.body)).toMatchObject({ error: 'too_many_streams', max: 8 });
    expect(refused.headers['retry-after']).toBe('5');
    open.pop()!.close();
    const again = async (): Promise<number> => {
      const reader = await events(o.httpPort, undefined, auth);
      return reader.status;
    };
    await expect.poll(again, { timeout: 3_000, interval: 50 }).toBe(200);
    // Past the 300 ms request timeout the stream still carries node events.
    const first = open[0]!;
    await first.next('snapshot');
    await first.next('node', 2_500);
    await first.next('node', 2_500);
    o.server.setSecret('two');
    await first.next('unauthorized', 2_500);
    await first.ended;
  });
});

describe('LockStream: a slow reader', () => {
  test('gets the latest state once its output drains, not a backlog; too many changes make a snapshot', async () => {
    const server = new TicketServer({ port: 0, leaseMs: 30_000 });
    await server.listen();
    cleanups.push(() => server.close());
    const c = client(server.address!.port);
    const written: string[] = [];
    let drain: (() => void) | undefined;
    const output: StreamOutput & { writableLength: number } = {
      writableLength: 0,
      write: (chunk) => written.push(chunk) > 0,
      once: (_event, listener) => (drain = listener),
      end: (done) => done(),
      destroy: () => {},
    };
    const limits = { maxKeys: 5, maxBufferedBytes: 1_000, resnapshotMs: 1_000, stallMs: 60_000 };
    const stream = new LockStream(output, new LockRows(server), '', limits, () => ({}) as never);
    stream.flush(0);
    expect(written.map((w) => w.split('\n')[0])).toEqual(['event: snapshot']);
    output.writableLength = 5_000; // the reader stopped reading
    await acquired(c, 'k1', 'first');
    stream.changed(['k1']);
    stream.flush(1);
    expect(written).toHaveLength(2); // written, then found backed up
    let token = await acquired(c, 'k2', 'a');
    for (const owner of ['b', 'c', 'd']) {
      await c.release('k2', token);
      token = await acquired(c, 'k2', owner);
      stream.changed(['k2']);
      stream.flush(2);
    }
    expect(written).toHaveLength(2); // nothing while backed up
    output.writableLength = 0;
    drain!();
    expect(written).toHaveLength(3);
    const latest = JSON.parse(written[2]!.split('\n')[1]!.slice('data: '.length)) as { upsert: Row[] };
    expect(latest.upsert.map((r) => [r.key, r.holders[0]!.owner])).toEqual([['k2', 'd']]);
    // More changed keys than the stream follows: one snapshot instead.
    stream.changed(['a', 'b', 'c', 'd', 'e', 'f']);
    stream.flush(3);
    expect(written[3]!.split('\n')[0]).toBe('event: snapshot');
  });
});
