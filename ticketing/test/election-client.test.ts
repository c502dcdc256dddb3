/**
 * publish() and observe() against a scripted fake server (a real socket whose every reply the test
 * decides): P/G matched by (key, token), V routed by key and never by position, one observation
 * per key, the newest view for a slow consumer, no rev yielded twice or backwards, O re-sent after
 * a reconnect, U on abort and return, U busy. The real server's side is in election.test.ts.
 */
import { afterEach, describe, expect, test } from 'vitest';
import { TicketClient, type TicketClientOptions } from '../src/client.js';
import {
  AuthFailedError,
  ClientClosedError,
  DuplicateRequestError,
  LockLostError,
  ObservationLimitError,
} from '../src/errors.js';
import { FakeServer, type LineSocket, nextValue, sleep, until } from './helpers.js';

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

/** Resolves true if `it` yields nothing within `ms` (the pending next() is left to the test). */
async function quiet(pending: Promise<unknown>, ms = 100): Promise<boolean> {
  return Promise.race([pending.then(() => false), sleep(ms).then(() => true)]);
}

describe('publish', () => {
  test('P answers by (key, token): resolved with the value; the line carries the value with its spaces', async () => {
    const server = await fake();
    const c = client(server.port);
    const a = c.publish('svc', 7n, 'http://10.0.0.5:8080 zone=a');
    const b = c.publish('other', '9', 'x');
    const conn = await server.connection(0);
    expect(await conn.readLines(2)).toEqual(['P svc 7 http://10.0.0.5:8080 zone=a', 'P other 9 x']);
    conn.write('P 9 other\nP 7 svc\n'); // out of order: matched by (key, token)
    expect(await a).toEqual({ key: 'svc', token: 7n, value: 'http://10.0.0.5:8080 zone=a' });
    expect(await b).toEqual({ key: 'other', token: 9n, value: 'x' });
  });

  test('G rejects with LockLostError (ETICKETLOST, gone); the connection stays', async () => {
    const server = await fake();
    const c = client(server.port);
    const published = outcome(c.publish('svc', 7n, 'v1'));
    const conn = await server.connection(0);
    await conn.readLine();
    conn.write('G 7 svc\n');
    expect(await published).toMatchObject({ code: 'ETICKETLOST', reason: 'gone', key: 'svc', token: 7n });
    expect(await published).toBeInstanceOf(LockLostError);
    const again = c.publish('svc', 8n, 'v2');
    expect(await conn.readLine()).toBe('P svc 8 v2');
    conn.write('P 8 svc\n');
    await again;
    expect(server.connections).toHaveLength(1);
  });

  test('a bad value is refused before anything is sent', async () => {
    const server = await fake();
    const c = client(server.port);
    await expect(c.publish('svc', 1n, '')).rejects.toThrow(RangeError);
    await expect(c.publish('svc', 1n, 'x'.repeat(513))).rejects.toThrow(/1-512 bytes/);
    await expect(c.publish('svc', 1n, 'tab\there')).rejects.toThrow(RangeError);
    await expect(c.publish('svc', 1n, 'é')).rejects.toThrow(RangeError);
    await expect(c.publish('svc', 1n, 5 as unknown as string)).rejects.toThrow(TypeError);
    await expect(c.publish('svc', 0n, 'v')).rejects.toThrow(RangeError);
    await expect(c.publish('bad key', 1n, 'v')).rejects.toThrow(RangeError);
    await sleep(50);
    expect(server.connections).toHaveLength(0);
  });

  test('a second publish of one (key, token) while the first is pending: DuplicateRequestError', async () => {
    const server = await fake();
    const c = client(server.port);
    const first = c.publish('svc', 3n, 'a');
    await expect(c.publish('svc', 3n, 'b')).rejects.toBeInstanceOf(DuplicateRequestError);
    const conn = await server.connection(0);
    expect(await conn.readLine()).toBe('P svc 3 a');
    conn.write('P 3 svc\n');
    await first;
  });

  test('a publish whose connection dies is Indeterminate (op publish)', async () => {
    const server = await fake();
    const c = client(server.port);
    const published = outcome(c.publish('svc', 3n, 'a'));
    const conn = await server.connection(0);
    await conn.readLine();
    conn.destroy();
    expect(await published).toMatchObject({ code: 'ETICKETINDETERMINATE', op: 'publish', key: 'svc', token: 3n });
  });
});

describe('observe', () => {
  test('O, then views in rev order: vacant, a holder with its value, shared holders; revs as bigint', async () => {
    const server = await fake();
    const c = client(server.port);
    const it = c.observe('svc');
    const conn = await server.connection(0);
    expect(await conn.readLine()).toBe('O svc');
    const big = 2n ** 60n;
    conn.write(`V svc ${big} -\n`);
    expect(await nextValue(it)).toEqual({ rev: big, holder: null, holders: 0 });
    conn.write(`V svc ${big + 1n} 42 node-a\n`);
    expect(await nextValue(it)).toEqual({
      rev: big + 1n,
      holder: { owner: 'node-a', token: 42n, value: null },
      holders: 1,
    });
    conn.write(`V svc ${big + 2n} 42 node-a 10.0.0.5:8080 zone a\n`);
    expect((await nextValue(it)).holder).toEqual({ owner: 'node-a', token: 42n, value: '10.0.0.5:8080 zone a' });
    conn.write(`V svc ${big + 5n} *3\n`);
    expect(await nextValue(it)).toEqual({ rev: big + 5n, holder: null, holders: 3 });
    await it.return();
  });

  test('V lines are routed by key, never by position', async () => {
    const server = await fake();
    const c = client(server.port);
    const a = c.observe('a');
    const b = c.observe('b');
    const conn = await server.connection(0);
    expect(await conn.readLines(2)).toEqual(['O a', 'O b']);
    conn.write('V b 7 -\nV a 3 1 x\n');
    expect(await nextValue(a)).toMatchObject({ rev: 3n, holders: 1 });
    expect(await nextValue(b)).toMatchObject({ rev: 7n, holders: 0 });
  });

  test('a slow consumer gets the newest view only; a rev at or below one yielded is dropped', async () => {
    const server = await fake();
    const c = client(server.port);
    const it = c.observe('svc');
    const conn = await server.connection(0);
    await conn.readLine();
    let lines = '';
    for (let rev = 1; rev <= 200; rev++) lines += `V svc ${rev} ${rev} owner-${rev}\n`;
    conn.write(lines);
    await sleep(100); // all of them arrived, unread
    expect(await nextValue(it)).toEqual({
      rev: 200n,
      holder: { owner: 'owner-200', token: 200n, value: null },
      holders: 1,
    });
    conn.write('V svc 200 -\nV svc 150 -\n'); // a repeat (a re-sent O) and an older one
    const pending = it.next();
    expect(await quiet(pending)).toBe(true);
    conn.write('V svc 201 -\n');
    expect(await pending).toEqual({ value: { rev: 201n, holder: null, holders: 0 }, done: false });
  });

  test('observers of one key share one O; the last one to leave sends U, which the server confirms', async () => {
    const server = await fake();
    const c = client(server.port);
    const first = c.observe('svc');
    const conn = await server.connection(0);
    expect(await conn.readLine()).toBe('O svc');
    conn.write('V svc 5 -\n');
    expect((await nextValue(first)).rev).toBe(5n);
    const second = c.observe('svc'); // gets the current view at once, with no second O
    expect((await nextValue(second)).rev).toBe(5n);
    conn.write('V svc 6 9 n\n');
    expect((await nextValue(first)).rev).toBe(6n);
    expect((await nextValue(second)).rev).toBe(6n);
    await first.return();
    await conn.expectSilence(50);
    await second.return();
    expect(await conn.readLine()).toBe('U svc');
    conn.write('U svc\n');
    // Observed again: a fresh O (and the connection stayed).
    const third = c.observe('svc');
    expect(await conn.readLine()).toBe('O svc');
    conn.write('V svc 7 -\n');
    expect((await nextValue(third)).rev).toBe(7n);
    expect(server.connections).toHaveLength(1);
  });

  test('aborting the signal sends U and ends the iterator (a waiting next() resolves done)', async () => {
    const server = await fake();
    const c = client(server.port);
    const controller = new AbortController();
    const it = c.observe('svc', { signal: controller.signal });
    const conn = await server.connection(0);
    await conn.readLine();
    conn.write('V svc 1 -\n');
    await nextValue(it);
    const waiting = it.next();
    controller.abort();
    expect(await waiting).toEqual({ value: undefined, done: true });
    expect(await conn.readLine()).toBe('U svc');
    expect(await it.next()).toEqual({ value: undefined, done: true });
    // V lines in flight before the U's confirmation are dropped, not a protocol error.
    conn.write('V svc 2 -\nU svc\n');
    await sleep(50);
    expect(conn.closed).toBe(false);
    // An aborted signal is refused up front.
    expect(() => c.observe('svc', { signal: controller.signal })).toThrow();
  });

  test('break out of for await sends U', async () => {
    const server = await fake();
    const c = client(server.port);
    const conn = server.connection(0);
    const seen: bigint[] = [];
    const loop = (async () => {
      for await (const view of c.observe('svc')) {
        seen.push(view.rev);
        if (view.rev === 2n) break;
      }
    })();
    const socket = await conn;
    expect(await socket.readLine()).toBe('O svc');
    socket.write('V svc 1 -\n');
    await until(() => seen.length === 1);
    socket.write('V svc 2 -\n');
    await loop;
    expect(seen).toEqual([1n, 2n]);
    expect(await socket.readLine()).toBe('U svc');
  });

  test('U busy ends the iterator with ObservationLimitError (ETICKETOBSERVELIMIT)', async () => {
    const server = await fake();
    const c = client(server.port);
    const it = c.observe('svc');
    const conn = await server.connection(0);
    await conn.readLine();
    conn.write('U svc busy\n');
    const error = await outcome(it.next());
    expect(error).toBeInstanceOf(ObservationLimitError);
    expect(error).toMatchObject({ code: 'ETICKETOBSERVELIMIT', key: 'svc' });
    expect(await it.next()).toEqual({ value: undefined, done: true });
    await conn.expectSilence(50); // no U is owed for a refused O
  });

  test('a lost connection: reconnects, sends O again, drops a rev it already yielded', async () => {
    const server = await fake();
    const c = client(server.port);
    const a = c.observe('a');
    const b = c.observe('b');
    const first = await server.connection(0);
    expect(await first.readLines(2)).toEqual(['O a', 'O b']);
    first.write('V a 10 1 x\nV b 3 -\n');
    expect((await nextValue(a)).rev).toBe(10n);
    expect((await nextValue(b)).rev).toBe(3n);
    first.destroy();
    const second = await server.connection(1);
    expect((await second.readLines(2)).sort()).toEqual(['O a', 'O b']);
    const pending = a.next();
    second.write('V a 10 1 x\n'); // the same state again: not yielded twice
    expect(await quiet(pending)).toBe(true);
    second.write('V a 12 2 y\n');
    expect((await pending).value).toMatchObject({ rev: 12n, holder: { owner: 'y', token: 2n } });
  });

  test('the server closing an observing connection without a word: reconnects and observes again', async () => {
    const server = await fake();
    const c = client(server.port);
    const it = c.observe('svc');
    const first = await server.connection(0);
    await first.readLine();
    first.write('V svc 1 -\n');
    await nextValue(it);
    first.socket.end(); // a graceful close, as a restarting server does
    const second = await server.connection(1);
    expect(await second.readLine()).toBe('O svc');
    second.write('V svc 2 -\n');
    expect((await nextValue(it)).rev).toBe(2n);
  });

  test('a server that keeps closing an observing connection gets reconnects with backoff, not a hot loop', async () => {
    const server = await fake();
    const c = client(server.port, { backoff: { initialMs: 50, maxMs: 100 } });
    const it = c.observe('svc');
    const closing = setInterval(() => {
      for (const conn of server.connections) if (conn.lines.length > 0 && !conn.closed) conn.socket.end();
    }, 1);
    cleanups.push(() => clearInterval(closing));
    await sleep(500);
    expect(server.connections.length).toBeGreaterThan(2);
    expect(server.connections.length).toBeLessThan(15); // at least 25 ms apart, not one per turn
    await it.return();
  });

  test('close() ends observers with ClientClosedError; observe after close throws', async () => {
    const server = await fake();
    const c = client(server.port);
    const it = c.observe('svc');
    const conn = await server.connection(0);
    await conn.readLine();
    const waiting = outcome(it.next());
    await c.close();
    expect(await waiting).toBeInstanceOf(ClientClosedError);
    expect(() => c.observe('svc')).toThrow(ClientClosedError);
    await conn.waitClosed();
  });

  test('a refused connection (E auth_failed) ends the observers with AuthFailedError', async () => {
    const server = new FakeServer({ answerProbe: false });
    await server.listen();
    cleanups.push(() => server.close());
    const c = client(server.port, { secret: 'wrong' });
    const it = c.observe('svc');
    const conn = await server.connection(0);
    expect(await conn.readLine()).toBe('H wrong');
    conn.write('E auth_failed\n');
    const error = await outcome(it.next());
    expect(error).toBeInstanceOf(AuthFailedError);
    expect(error).toMatchObject({ op: 'observe', key: 'svc' });
  });

  test('a V for a key nobody observes is out of place: the connection is closed, then observed again', async () => {
    const server = await fake();
    const c = client(server.port);
    const it = c.observe('svc');
    const first = await server.connection(0);
    await first.readLine();
    first.write('V stranger 1 -\n');
    await first.waitClosed();
    const second = await server.connection(1);
    expect(await second.readLine()).toBe('O svc');
    second.write('V svc 1 -\n');
    expect((await nextValue(it)).rev).toBe(1n);
  });

  test('a V line of 1,070 bytes fits the default line limit (2048)', async () => {
    const server = await fake();
    const c = client(server.port);
    const key = 'k'.repeat(256);
    const owner = 'o'.repeat(256);
    const value = 'v'.repeat(512);
    const it = c.observe(key);
    const conn = await server.connection(0);
    await conn.readLine();
    const line = `V ${key} 18446744073709551615 18446744073709551615 ${owner} ${value}\n`;
    expect(line.length).toBeGreaterThan(1_060);
    conn.write(line);
    expect((await nextValue(it)).holder).toEqual({ owner, token: 2n ** 64n - 1n, value });
  });

  test('a bad key or options throw before anything is sent', async () => {
    const server = await fake();
    const c = client(server.port);
    expect(() => c.observe('bad key')).toThrow(RangeError);
    expect(() => c.observe(5 as unknown as string)).toThrow(TypeError);
    expect(() => c.observe('k', { signal: 'x' as unknown as AbortSignal })).toThrow(TypeError);
    await sleep(50);
    expect(server.connections).toHaveLength(0);
  });
});

describe('campaign', () => {
  /** Grants the campaign's acquire (connection 0) and its first keep (connection 1); returns the
   * observe lane's connection (2) once the publish arrived on it, and that publish's line. */
  async function granted(server: FakeServer, token: number): Promise<{ conn: LineSocket; line: string }> {
    const acquires = await server.connection(0);
    const [, key, owner] = (await acquires.readLine()).split(' ');
    acquires.write(`A ${token} ${owner} ${key}\n`);
    const keeps = await server.connection(1);
    expect(await keeps.readLine()).toBe(`K ${key} ${token}`);
    keeps.write(`K ${token} ${key} 30000\n`);
    const conn = await server.connection(2);
    return { conn, line: await conn.readLine() };
  }

  test('holds, publishes the value, then resolves; publishes run in call order', async () => {
    const server = await fake();
    const c = client(server.port);
    const campaign = c.campaign('svc', { value: 'first' });
    const { conn, line } = await granted(server, 11);
    expect(line).toBe('P svc 11 first');
    conn.write('P 11 svc\n');
    const leadership = await campaign;
    expect(leadership).toMatchObject({ key: 'svc', token: 11n, slot: undefined });
    expect(leadership.signal.aborted).toBe(false);
    const second = leadership.publish('second');
    const third = leadership.publish('third');
    expect(await conn.readLine()).toBe('P svc 11 second');
    await conn.expectSilence(50); // the third waits for the second's answer
    conn.write('P 11 svc\n');
    expect(await conn.readLine()).toBe('P svc 11 third');
    conn.write('P 11 svc\n');
    expect(await second).toMatchObject({ value: 'second' });
    expect(await third).toMatchObject({ value: 'third' });
  });

  test('a publish answered G: campaign rejects with LockLostError and releases', async () => {
    const server = await fake();
    const c = client(server.port);
    const campaign = outcome(c.campaign('svc', { value: 'v' }));
    const { conn } = await granted(server, 12);
    conn.write('G 12 svc\n');
    expect(await campaign).toMatchObject({ code: 'ETICKETLOST', reason: 'gone' });
    const releases = await server.connection(1);
    expect(await releases.readLine()).toBe('R svc 12');
    releases.write('N 12 svc\n');
  });

  test('a publish answered G later: the signal aborts at once with the LockLostError', async () => {
    const server = await fake();
    const c = client(server.port);
    const campaign = c.campaign('svc');
    const acquires = await server.connection(0);
    const [, , owner] = (await acquires.readLine()).split(' ');
    acquires.write(`A 13 ${owner} svc\n`);
    const keeps = await server.connection(1);
    await keeps.readLine();
    keeps.write('K 13 svc 30000\n');
    const leadership = await campaign;
    const published = outcome(leadership.publish('v'));
    const conn = await server.connection(2);
    await conn.readLine();
    conn.write('G 13 svc\n');
    expect(await published).toBeInstanceOf(LockLostError);
    expect(leadership.signal.aborted).toBe(true);
    expect(leadership.signal.reason).toBeInstanceOf(LockLostError);
    await expect(leadership.publish('w')).rejects.toBeInstanceOf(LockLostError);
  });

  test('a publish whose connection was lost is sent again, and resolves on the answer', async () => {
    const server = await fake();
    const c = client(server.port);
    const campaign = c.campaign('svc', { value: 'v' });
    const { conn } = await granted(server, 14);
    conn.destroy();
    const again = await server.connection(3);
    expect(await again.readLine()).toBe('P svc 14 v');
    again.write('P 14 svc\n');
    const leadership = await campaign;
    expect(leadership.token).toBe(14n);
  });

  test('bad options are refused before anything is sent', async () => {
    const server = await fake();
    const c = client(server.port);
    await expect(c.campaign('svc', { value: '' })).rejects.toThrow(RangeError);
    await expect(c.campaign('svc', { shared: true } as never)).rejects.toThrow(TypeError);
    await expect(c.campaign('svc', { permits: 2 } as never)).rejects.toThrow(TypeError);
    await sleep(50);
    expect(server.connections).toHaveLength(0);
  });
});
