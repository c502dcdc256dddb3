/**
 * renew, hold and the local deadline, and the re-sent release, against a scripted fake server: the
 * test decides every reply (K, G, silence, a dropped connection) and when it comes.
 */
import { afterEach, describe, expect, test } from 'vitest';
import { TicketClient, type TicketClientOptions } from '../src/client.js';
import {
  DuplicateRequestError,
  IndeterminateError,
  LockLostError,
  NotAcquiredError,
  ProtocolError,
} from '../src/errors.js';
import { FakeServer, type LineSocket, sleep } from './helpers.js';

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
  const c = new TicketClient({ port, backoff: { initialMs: 5, maxMs: 20 }, ...options });
  cleanups.push(() => c.destroy());
  return c;
}

async function outcome<T>(promise: Promise<T>): Promise<T | Error> {
  try {
    return await promise;
  } catch (error) {
    return error as Error;
  }
}

/** Answers the acquire on connection 0 with a grant, and returns the release lane (connection 1)
 * once the first keep arrived on it, with the time it arrived. */
async function grant(server: FakeServer, token: number): Promise<{ lane: LineSocket; keptAt: number }> {
  const acquires = await server.connection(0);
  const line = await acquires.readLine();
  const [, key, owner] = line.split(' ');
  acquires.write(`A ${token} ${owner} ${key}\n`);
  const lane = await server.connection(1);
  expect(await lane.readLine()).toBe(`K ${key} ${token}`);
  return { lane, keptAt: performance.now() };
}

describe('renew', () => {
  test('K resolves with the lease the server applied, counted from when the keep was sent', async () => {
    const server = await fake();
    const c = client(server.port, { leaseMs: 30_000 });
    const before = Date.now();
    const renewed = c.renew('k', 5n);
    const lane = await server.connection(0);
    expect(await lane.readLine()).toBe('K k 5');
    lane.write('K 5 k 4000\n');
    const result = await renewed;
    expect(result).toMatchObject({ key: 'k', token: 5n, leaseMs: 4000 });
    expect(result.expiresAt.getTime()).toBeGreaterThanOrEqual(before + 4000 - 5);
    expect(result.expiresAt.getTime()).toBeLessThanOrEqual(Date.now() + 4000);
  });

  test('G rejects with LockLostError (code ETICKETLOST, reason gone)', async () => {
    const server = await fake();
    const c = client(server.port);
    const renewed = outcome(c.renew('k', '6'));
    const lane = await server.connection(0);
    await lane.readLine();
    lane.write('G 6 k\n');
    const error = await renewed;
    expect(error).toBeInstanceOf(LockLostError);
    expect(error).toMatchObject({ code: 'ETICKETLOST', reason: 'gone', key: 'k', token: 6n });
  });

  test('replies are matched by (key, token), not by position; a second keep of one (key, token) is refused unsent', async () => {
    const server = await fake();
    const c = client(server.port);
    const a = c.renew('k', 5n);
    const b = outcome(c.renew('j', 5n));
    const d = c.renew('k', 6n);
    const duplicate = await outcome(c.renew('k', 5n));
    expect(duplicate).toBeInstanceOf(DuplicateRequestError);
    expect(duplicate).toMatchObject({ code: 'ETICKETDUPLICATE', key: 'k', token: 5n });
    const lane = await server.connection(0);
    expect(await lane.readLines(3)).toEqual(['K k 5', 'K j 5', 'K k 6']);
    lane.write('K 6 k 100\nG 5 j\nK 5 k 200\n');
    expect((await a).leaseMs).toBe(200);
    expect((await d).leaseMs).toBe(100);
    expect(await b).toBeInstanceOf(LockLostError);
    await lane.expectSilence(30);
  });

  test('keeps travel on the release lane, never behind acquires', async () => {
    const server = await fake();
    const c = client(server.port);
    const waiting = outcome(c.acquire('k', { waitMs: 60_000, owner: 'o' }));
    const acquires = await server.connection(0);
    expect(await acquires.readLine()).toBe('A k o 60000');
    const renewed = c.renew('other', 9n);
    const lane = await server.connection(1);
    expect(await lane.readLine()).toBe('K other 9');
    lane.write('K 9 other 1000\n');
    expect((await renewed).leaseMs).toBe(1000);
    c.destroy();
    expect(await waiting).toBeInstanceOf(IndeterminateError);
  });

  test('a lost answer is Indeterminate (op keep); an unmatched K is a protocol error that ends the connection', async () => {
    const server = await fake();
    const c = client(server.port);
    const lost = outcome(c.renew('k', 5n));
    const lane = await server.connection(0);
    await lane.readLine();
    lane.destroy();
    expect(await lost).toMatchObject({ code: 'ETICKETINDETERMINATE', op: 'keep', reason: 'connection-lost' });
    const second = outcome(c.renew('k', 5n));
    const next = await server.connection(1);
    await next.readLine();
    next.write('K 99 k 1000\n');
    const error = await second;
    expect(error).toBeInstanceOf(IndeterminateError);
    expect((error as IndeterminateError).cause).toBeInstanceOf(ProtocolError);
  });
});

describe('hold', () => {
  test('the first keep goes out at once after the grant; the lease comes from its reply, not from leaseMs', async () => {
    const server = await fake();
    const c = client(server.port, { leaseMs: 30_000 });
    const held = c.hold('k', { owner: 'me' });
    const { lane } = await grant(server, 7);
    lane.write('K 7 k 900\n');
    const hold = await held;
    expect(hold).toMatchObject({ key: 'k', owner: 'me', token: 7n, leaseMs: 900 });
    expect(hold.deadline.getTime() - Date.now()).toBeLessThan(900 - 50);
    expect(hold.signal.aborted).toBe(false);
    // The next keep a third of the lease after the first was sent.
    expect(await lane.readLine(2_000)).toBe('K k 7');
    lane.write('K 7 k 900\n');
    const released = hold.release();
    expect(await lane.readLine()).toBe('R k 7');
    lane.write('R 7 k\n');
    expect(await released).toEqual({ status: 'released', key: 'k', token: 7n });
    expect(hold.signal.aborted).toBe(true);
    expect((hold.signal.reason as Error).name).toBe('AbortError');
    expect(await hold.release()).toEqual({ status: 'released', key: 'k', token: 7n }); // idempotent
  });

  test('with no reply at all, the signal aborts before the lease the server applied runs out', async () => {
    const server = await fake();
    const c = client(server.port);
    const held = c.hold('k', { owner: 'me' });
    const { lane } = await grant(server, 7);
    lane.write('K 7 k 600\n');
    const hold = await held;
    // The next keep is never answered (a paused server, a partition).
    expect(await lane.readLine(2_000)).toBe('K k 7');
    const lastKeepSeenAt = performance.now(); // the client sent it no later than this
    const abortedAt = await new Promise<number>((resolve) =>
      hold.signal.addEventListener('abort', () => resolve(performance.now())),
    );
    expect(hold.signal.reason).toBeInstanceOf(LockLostError);
    expect(hold.signal.reason).toMatchObject({ code: 'ETICKETLOST', reason: 'deadline' });
    // The server's lease of that keep ends 600 ms after it applied it, which is after it arrived.
    expect(abortedAt).toBeLessThan(lastKeepSeenAt + 600);
  });

  test('G aborts the signal at once; release() then sends nothing and says not-held', async () => {
    const server = await fake();
    const c = client(server.port);
    const held = c.hold('k', { owner: 'me', keepEveryMs: 50 });
    const { lane } = await grant(server, 8);
    lane.write('K 8 k 30000\n');
    const hold = await held;
    expect(await lane.readLine()).toBe('K k 8');
    const goneAt = performance.now();
    lane.write('G 8 k\n');
    await new Promise((resolve) => hold.signal.addEventListener('abort', resolve));
    expect(performance.now() - goneAt).toBeLessThan(1_000);
    expect(hold.signal.reason).toMatchObject({ code: 'ETICKETLOST', reason: 'gone' });
    expect(await hold.release()).toEqual({ status: 'not-held', key: 'k', token: 8n });
    await lane.expectSilence(100);
  });

  test('a keep that lost its connection is retried on a new one within the remaining lease', async () => {
    const server = await fake();
    const c = client(server.port);
    // A keep unanswered for keepEveryMs is abandoned with its connection: 200 ms, so that only the
    // destroyed lane, never this scripted server's pauses on a loaded machine, sends it elsewhere.
    const held = c.hold('k', { owner: 'me', keepEveryMs: 200 });
    const { lane } = await grant(server, 9);
    lane.write('K 9 k 2000\n');
    const hold = await held;
    expect(await lane.readLine()).toBe('K k 9');
    lane.destroy();
    const again = await server.connection(2);
    expect(await again.readLine()).toBe('K k 9');
    again.write('K 9 k 2000\n');
    await sleep(50);
    expect(hold.signal.aborted).toBe(false);
    const released = hold.release();
    // The keep schedule may have put more Ks before the R: answered in order, as a server does.
    let line = await again.readLine();
    for (; line === 'K k 9'; line = await again.readLine()) again.write('K 9 k 2000\n');
    expect(line).toBe('R k 9');
    again.write('R 9 k\n');
    expect((await released).status).toBe('released');
  });

  test('a key that stays held rejects with NotAcquiredError and keeps nothing', async () => {
    const server = await fake();
    const c = client(server.port);
    const held = outcome(c.hold('k', { owner: 'me', waitMs: 10 }));
    const acquires = await server.connection(0);
    expect(await acquires.readLine()).toBe('A k me 10');
    acquires.write('T me k\n');
    const error = await held;
    expect(error).toBeInstanceOf(NotAcquiredError);
    expect(error).toMatchObject({ code: 'ETICKETNOTACQUIRED', status: 'timed-out' });
    expect(server.connections.length).toBe(1);
  });

  test('G to the first keep rejects the hold with LockLostError', async () => {
    const server = await fake();
    const c = client(server.port);
    const held = outcome(c.hold('k', { owner: 'me' }));
    const { lane } = await grant(server, 10);
    lane.write('G 10 k\n');
    expect(await held).toMatchObject({ code: 'ETICKETLOST', reason: 'gone' });
    await lane.expectSilence(50);
  });

  test('bad options are refused before anything is sent', async () => {
    const server = await fake();
    const c = client(server.port);
    await expect(c.hold('k', { keepEveryMs: -1 })).rejects.toBeInstanceOf(RangeError);
    await expect(c.hold('k', { margin: { fraction: 2 } })).rejects.toBeInstanceOf(RangeError);
    await expect(c.hold('', {})).rejects.toBeInstanceOf(RangeError);
    await sleep(20);
    expect(server.connections.length).toBe(0);
  });
});

describe('a release whose answer was lost', () => {
  test('is sent again on a new connection until it is answered', async () => {
    const server = await fake();
    const c = client(server.port);
    const released = c.release('k', 11n);
    const first = await server.connection(0);
    expect(await first.readLine()).toBe('R k 11');
    first.destroy();
    const second = await server.connection(1);
    expect(await second.readLine()).toBe('R k 11');
    second.write('N 11 k\n');
    expect(await released).toEqual({ status: 'not-held', key: 'k', token: 11n });
  });

  test('is Indeterminate once the lease has surely run out', async () => {
    const server = await fake();
    const c = client(server.port, { leaseMs: 300 });
    const started = performance.now();
    const released = outcome(c.release('k', 12n));
    let n = 0;
    const dropping = (async () => {
      for (; ; n++) {
        const conn = await server.connection(n, 500).catch(() => undefined);
        if (conn === undefined) return;
        await conn.readLine().catch(() => {});
        conn.destroy();
      }
    })();
    const error = await released;
    expect(error).toMatchObject({ code: 'ETICKETINDETERMINATE', op: 'release', token: 12n });
    expect(performance.now() - started).toBeGreaterThanOrEqual(300);
    expect(n).toBeGreaterThan(1);
    c.destroy();
    await server.close();
    await dropping;
  });

  test('an aborted release is not sent again', async () => {
    const server = await fake();
    const c = client(server.port);
    const controller = new AbortController();
    const released = outcome(c.release('k', 13n, { signal: controller.signal }));
    const first = await server.connection(0);
    await first.readLine();
    controller.abort(new Error('stop'));
    expect(await released).toMatchObject({ code: 'ETICKETINDETERMINATE', reason: 'aborted' });
    await sleep(50);
    expect(server.connections.length).toBe(1);
  });
});
