/**
 * The server against a raw TCP client on loopback: the wire format byte for byte, every row of
 * both tables, the FIFO hand-off, expiry, tokens across restarts, auth, limits, hostile clients,
 * backpressure and draining.
 */
import { execFileSync } from 'node:child_process';
import diagnostics from 'node:diagnostics_channel';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, test, vi } from 'vitest';
import { TicketServer, type TicketServerOptions } from '../src/server/server.js';
import { LineSocket, sleep, startServer, tokenOf, until } from './helpers.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  vi.useRealTimers(); // first: closing a server waits on its timers
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

function subscribeDisconnects(): Array<{ reason: string }> {
  const seen: Array<{ reason: string }> = [];
  const listener = (m: unknown): void => void seen.push(m as { reason: string });
  diagnostics.subscribe('ticketing:server:disconnect', listener);
  cleanups.push(() => void diagnostics.unsubscribe('ticketing:server:disconnect', listener));
  return seen;
}

describe('W: the leader probe', () => {
  test('a single-mode server answers W at once and changes nothing; the connection stays open', async () => {
    const { port, server: s } = await server();
    const c = await connect(port);
    c.write('W\nW\n');
    expect(await c.readLines(2)).toEqual(['W', 'W']);
    c.write('A k o 0\n');
    expect(await c.readLine()).toMatch(/^A [1-9][0-9]* o k$/);
    expect(s.inspect('k')).toMatchObject({ owner: 'o' });
    c.write('W extra\n');
    expect(await c.readLine()).toBe('E bad_request W takes no fields');
    await c.waitClosed();
  });

  test('with a secret, W is answered only after H', async () => {
    const { port } = await server({ secret: 's3cret' });
    const refused = await connect(port);
    refused.write('W\n');
    expect(await refused.readLine()).toBe('E auth_failed');
    const c = await connect(port);
    c.write('H s3cret\nW\n');
    expect(await c.readLine()).toBe('W');
  });
});

describe('A: the acquire table', () => {
  test('not registered: "A <token> <owner> <key>" at once, token about the wall clock in µs', async () => {
    const { port, server: s } = await server();
    const c = await connect(port);
    const before = BigInt(Date.now()) * 1000n;
    c.write('A orders worker-1 0\n');
    const line = await c.readLine();
    expect(line).toMatch(/^A [1-9][0-9]* worker-1 orders$/);
    const token = tokenOf(line);
    expect(token >= before - 1_000_000n && token <= BigInt(Date.now() + 1_000) * 1000n).toBe(true);
    expect(s.inspect('orders')).toMatchObject({ owner: 'worker-1', token });
    expect(c.received.toString('latin1')).toBe(`${line}\n`);
  });

  test('registered and expired: taken over at once with a greater token', async () => {
    const { port } = await server({ leaseMs: 100 });
    const c = await connect(port);
    c.write('A k o1 0\n');
    const first = tokenOf(await c.readLine());
    await sleep(150);
    c.write('A k o2 0\n');
    const line = await c.readLine();
    expect(line).toMatch(/^A \d+ o2 k$/);
    expect(tokenOf(line) > first).toBe(true);
  });

  test('registered, valid holder, wait 0: "T <owner> <key>" at once', async () => {
    const { port } = await server();
    const c = await connect(port);
    c.write('A k o1 0\nA k o2 0\n');
    expect((await c.readLines(2))[1]).toBe('T o2 k');
  });

  test('registered, valid holder, wait > 0: queued with no reply; A on release, T when the wait runs out', async () => {
    const { port, server: s } = await server();
    const holder = await connect(port);
    const waiter = await connect(port);
    holder.write('A k h 0\n');
    const token = tokenOf(await holder.readLine());
    const sentAt = Date.now();
    waiter.write('A k w1 60000\nA k w2 150\n');
    await until(() => s.inspect('k')?.waiters.length === 2);
    expect(waiter.lines).toEqual([]);
    // w2's wait runs out: T, no earlier than its wait.
    expect(await waiter.readLine()).toBe('T w2 k');
    expect(Date.now() - sentAt).toBeGreaterThanOrEqual(145);
    holder.write(`R k ${token}\n`);
    expect(await holder.readLine()).toBe(`R ${token} k`);
    const handed = await waiter.readLine();
    expect(handed).toMatch(/^A \d+ w1 k$/);
    expect(tokenOf(handed) > token).toBe(true);
  });

  test('a wait of up to 2^53-1 ms is accepted and queued like any other', async () => {
    const { port, server: s } = await server();
    const c = await connect(port);
    c.write('A k h 0\nA k patient 9007199254740991\n');
    const token = tokenOf(await c.readLine());
    await until(() => s.inspect('k')?.waiters.length === 1);
    expect(s.inspect('k')!.waiters[0]!.deadline).toBeGreaterThan(Date.now() + 2 ** 52);
    c.write(`R k ${token}\n`);
    expect((await c.readLines(2))[1]).toMatch(/^A \d+ patient k$/);
  });

  test('caps: per-key queue, total waiters and total keys answer "B <owner> <key>" and do not queue', async () => {
    const { port, server: s } = await server({ maxWaitersPerKey: 1, maxWaiters: 2, maxKeys: 3 });
    const c = await connect(port);
    c.write('A a h 0\nA b h 0\nA c h 0\n');
    await c.readLines(3);
    c.write('A a w1 60000\nA a w2 60000\nA b w3 60000\nA c w4 60000\nA d h 0\n');
    expect(await c.readLines(3)).toEqual(['B w2 a', 'B w4 c', 'B h d']);
    expect(s.stats()).toMatchObject({ keys: 3, waiters: 2 });
  });

  test("the owner is no authority: the holder's own owner gets T, not its token or a renewal", async () => {
    const { port, server: s } = await server();
    const c = await connect(port);
    c.write('A k same 0\n');
    const token = tokenOf(await c.readLine());
    const expiry = s.inspect('k')!.expiresAt;
    c.write('A k same 0\n');
    expect(await c.readLine()).toBe('T same k');
    expect(s.inspect('k')).toMatchObject({ token, expiresAt: expiry });
  });

  test('pipelined requests for many keys come back matched by key and owner, immediate ones in order', async () => {
    const { port } = await server();
    const c = await connect(port);
    const lines = Array.from({ length: 200 }, (_, i) => `A key${i % 50} own${i} 0\n`).join('');
    c.write(lines);
    const replies = await c.readLines(200);
    replies.forEach((reply, i) => {
      if (i < 50) expect(reply).toMatch(new RegExp(`^A \\d+ own${i} key${i}$`));
      else expect(reply).toBe(`T own${i} key${i % 50}`);
    });
  });
});

describe('R: the release table', () => {
  test('token matches, waiters: "R <token> <key>" and the front waiter gets the key with a new token', async () => {
    const { port, server: s } = await server();
    const a = await connect(port);
    const b = await connect(port);
    a.write('A k o1 0\n');
    const token = tokenOf(await a.readLine());
    b.write('A k o2 60000\n');
    // B is queued before the release: the grant below is the hand-off, not a fresh acquire.
    await until(() => s.inspect('k')?.waiters.length === 1, "B's request queued on k");
    a.write(`R k ${token}\n`);
    expect(await a.readLine()).toBe(`R ${token} k`);
    expect(await b.readLine()).toMatch(/^A \d+ o2 k$/);
    expect(tokenOf(b.lines[0]!) > token).toBe(true);
  });

  test('token matches, no waiters: R and the key is gone', async () => {
    const { port, server: s } = await server();
    const c = await connect(port);
    c.write('A k o1 0\n');
    const token = tokenOf(await c.readLine());
    c.write(`R k ${token}\n`);
    expect(await c.readLine()).toBe(`R ${token} k`);
    expect(s.inspect('k')).toBeUndefined();
    c.write('A k o2 0\n');
    expect(await c.readLine()).toMatch(/^A \d+ o2 k$/);
  });

  test('token mismatch: "N <token> <key>" and the lock stays held', async () => {
    const { port } = await server();
    const c = await connect(port);
    c.write('A k o1 0\n');
    const token = tokenOf(await c.readLine());
    c.write(`R k ${token + 1n}\nA k o2 0\n`);
    expect(await c.readLines(2)).toEqual([`N ${token + 1n} k`, 'T o2 k']);
  });

  test('not registered: N', async () => {
    const { port } = await server();
    const c = await connect(port);
    c.write('R nothing 12345\n');
    expect(await c.readLine()).toBe('N 12345 nothing');
  });

  test('expired but not yet swept: R; once the sweep ran: N', async () => {
    const { port } = await server({ leaseMs: 50, sweepIntervalMs: 60_000 });
    const c = await connect(port);
    c.write('A k o 0\n');
    const token = tokenOf(await c.readLine());
    await sleep(100);
    c.write(`R k ${token}\n`);
    expect(await c.readLine()).toBe(`R ${token} k`);

    const swept = await server({ leaseMs: 50, sweepIntervalMs: 100 });
    const d = await connect(swept.port);
    d.write('A k o 0\n');
    const token2 = tokenOf(await d.readLine());
    await until(() => swept.server.inspect('k') === undefined, 'the sweep', 5_000);
    d.write(`R k ${token2}\n`);
    expect(await d.readLine()).toBe(`N ${token2} k`);
  });
});

describe('hand-off and expiry', () => {
  test('release hands off FIFO: waiters get the key one at a time in arrival order', async () => {
    const { port, server: s } = await server();
    const holder = await connect(port);
    holder.write('A k h 0\n');
    let token = tokenOf(await holder.readLine());
    const waiters: LineSocket[] = [];
    for (let i = 0; i < 6; i++) {
      const w = await connect(port);
      w.write(`A k w${i} 60000\n`);
      await until(() => s.inspect('k')?.waiters.length === i + 1);
      waiters.push(w);
    }
    let current = holder;
    for (let i = 0; i < 6; i++) {
      current.write(`R k ${token}\n`);
      const line = await waiters[i]!.readLine();
      expect(line).toMatch(new RegExp(`^A \\d+ w${i} k$`));
      const next = tokenOf(line);
      expect(next > token).toBe(true);
      // Nobody else got anything.
      for (const other of waiters.slice(i + 1)) expect(other.lines.length).toBe(0);
      token = next;
      current = waiters[i]!;
    }
  });

  test('a key that expires with waiters goes to the front waiter at its expiry', async () => {
    const { port } = await server({ leaseMs: 200 });
    const holder = await connect(port);
    const waiter = await connect(port);
    const start = Date.now();
    holder.write('A k sleepy 0\n');
    const token = tokenOf(await holder.readLine());
    waiter.write('A k w 10000\n');
    const line = await waiter.readLine();
    const elapsed = Date.now() - start;
    expect(line).toMatch(/^A \d+ w k$/);
    expect(tokenOf(line) > token).toBe(true);
    expect(elapsed).toBeGreaterThanOrEqual(180);
    expect(elapsed).toBeLessThan(3_000);
    // The old holder's token no longer releases anything.
    holder.write(`R k ${token}\n`);
    expect(await holder.readLine()).toBe(`N ${token} k`);
  });

  test('expiry is the only non-FIFO path: an acquire that finds the key expired takes it ahead of the queue', async () => {
    let now = Date.now();
    // A frozen clock moved by hand: the key is past its expiry before the expiry timer fires.
    const { port, server: s } = await server({ leaseMs: 10_000, clock: () => now });
    const c = await connect(port);
    c.write('A k h 0\nA k queued 60000\n');
    await c.readLine();
    await until(() => s.inspect('k')?.waiters.length === 1);
    now += 20_000;
    c.write('A k late 0\n');
    expect(await c.readLine()).toMatch(/^A \d+ late k$/);
    expect(s.inspect('k')!.waiters.map((w) => w.owner)).toEqual(['queued']);
  });

  test('a waiter whose connection drops leaves the queue, and is skipped by the hand-off', async () => {
    const { port, server: s } = await server();
    const holder = await connect(port);
    holder.write('A k h 0\n');
    const token = tokenOf(await holder.readLine());
    const gone = await connect(port);
    const halfClosed = await connect(port);
    const stays = await connect(port);
    gone.write('A k gone 60000\n');
    halfClosed.write('A k half 60000\n');
    stays.write('A k stays 60000\n');
    await until(() => s.inspect('k')?.waiters.length === 3);
    gone.destroy();
    halfClosed.socket.end(); // FIN: it will read nothing more
    await until(() => s.inspect('k')?.waiters.length === 1, 'the dropped waiters to leave', 5_000);
    expect(s.inspect('k')!.waiters.map((w) => w.owner)).toEqual(['stays']);
    holder.write(`R k ${token}\n`);
    expect(await stays.readLine()).toMatch(/^A \d+ stays k$/);
  });
});

describe('tokens are never reused, even across a restart', () => {
  test('a restarted server issues greater tokens than its predecessor', async () => {
    const first = new TicketServer({ port: 0 });
    const { port } = await first.listen();
    const c = await LineSocket.connect(port);
    c.write('A a o 0\nA b o 0\nA c o 0\n');
    const last = tokenOf((await c.readLines(3))[2]!);
    c.destroy();
    await first.close();
    const second = await server();
    const d = await connect(second.port);
    d.write('A a o 0\n');
    expect(tokenOf(await d.readLine()) > last).toBe(true);
  });

  test('with a state file, a clock stepped back an hour still cannot reuse a token', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ticketing-state-'));
    const stateFile = join(dir, 'tokens.json');
    const first = new TicketServer({ port: 0, stateFile });
    const c = await LineSocket.connect((await first.listen()).port);
    c.write('A a o 0\n');
    const issued = tokenOf(await c.readLine());
    c.destroy();
    await first.close();
    const mark = BigInt((JSON.parse(readFileSync(stateFile, 'utf8')) as { highWater: string }).highWater);
    expect(mark >= issued).toBe(true);

    const hourAgo = (): number => Date.now() - 3_600_000;
    // Without the file the stepped-back clock would hand out smaller tokens…
    const forgetful = await server({ clock: hourAgo });
    const f = await connect(forgetful.port);
    f.write('A a o 0\n');
    expect(tokenOf(await f.readLine()) < issued).toBe(true);
    // …with it, every token is above the mark.
    const remembering = await server({ clock: hourAgo, stateFile });
    const r = await connect(remembering.port);
    r.write('A a o 0\nA b o 0\n');
    const [t1, t2] = (await r.readLines(2)).map(tokenOf) as [bigint, bigint];
    expect(t1).toBe(mark + 1n);
    expect(t2).toBe(mark + 2n);
  });

  test('a corrupt state file stops the server from starting', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ticketing-state-'));
    const stateFile = join(dir, 'tokens.json');
    writeFileSync(stateFile, '{"version":1,"highWater":"12x"}');
    await expect(new TicketServer({ port: 0, stateFile }).listen()).rejects.toThrow(/not a ticketing state file/);
    writeFileSync(stateFile, 'garbage');
    await expect(new TicketServer({ port: 0, stateFile }).listen()).rejects.toThrow(/not valid JSON/);
  });
});

describe('hostile or broken clients never hurt others', () => {
  test('a malformed line: replies already due, then "E bad_request …", then close; nothing after it runs', async () => {
    const { port, server: s } = await server();
    const bystander = await connect(port);
    bystander.write('A shared b 0\n');
    const token = tokenOf(await bystander.readLine());
    const bad = await connect(port);
    bad.write('A k o 0\nHELLO there\nA k2 o 0\n');
    expect(await bad.readLine()).toMatch(/^A \d+ o k$/);
    expect(await bad.readLine()).toMatch(/^E bad_request \S/);
    await bad.waitClosed();
    expect(s.inspect('k2')).toBeUndefined();
    bystander.write(`R shared ${token}\n`);
    expect(await bystander.readLine()).toBe(`R ${token} shared`);
  });

  test('binary input gets E bad_request and the connection is closed', async () => {
    const { port } = await server();
    const c = await connect(port);
    c.write(Buffer.from([0x41, 0x20, 0x00, 0xff, 0xfe, 0x20, 0x6f, 0x20, 0x30, 0x0a]));
    expect(await c.readLine()).toMatch(/^E bad_request/);
    await c.waitClosed();
  });

  test('an oversized line gets E too_long and the connection is closed (terminated or not)', async () => {
    const { port } = await server({ maxLineBytes: 64 });
    const a = await connect(port);
    a.write(`A ${'k'.repeat(100)} o 0\n`);
    expect(await a.readLine()).toBe('E too_long line exceeds 64 bytes');
    await a.waitClosed();
    const b = await connect(port);
    b.write('x'.repeat(100_000)); // never a newline: the server must not buffer it
    expect(await b.readLine()).toMatch(/^E too_long/);
    await b.waitClosed();
    // The limit counts the terminator: 63 bytes + \n is fine.
    const c = await connect(port);
    const key = 'k'.repeat(63 - 'A  o 0'.length);
    c.write(`A ${key} o 0\n`);
    expect(await c.readLine()).toMatch(new RegExp(`^A \\d+ o ${key}$`));
  });

  test('connections over the limit get E capacity and are closed; a freed slot is usable again', async () => {
    const { port, server: s } = await server({ maxConnections: 2 });
    const a = await connect(port);
    await connect(port);
    const over = await connect(port);
    expect(await over.readLine()).toBe('E capacity too many connections');
    await over.waitClosed();
    a.destroy();
    await until(() => s.stats().connections === 1, 'the server to free the slot');
    const again = await connect(port);
    again.write('A k o 0\n');
    expect(await again.readLine()).toMatch(/^A \d+ o k$/);
  });

  test('a client that never reads: the server stops reading it, buffers a bounded amount, then cuts it off', async () => {
    const backpressure: Array<{ paused: boolean; bufferedBytes: number }> = [];
    const disconnects: Array<{ reason: string }> = [];
    const onBackpressure = (m: unknown): void => void backpressure.push(m as never);
    const onDisconnect = (m: unknown): void => void disconnects.push(m as never);
    diagnostics.subscribe('ticketing:server:backpressure', onBackpressure);
    diagnostics.subscribe('ticketing:server:disconnect', onDisconnect);
    cleanups.push(() => {
      diagnostics.unsubscribe('ticketing:server:backpressure', onBackpressure);
      diagnostics.unsubscribe('ticketing:server:disconnect', onDisconnect);
    });
    const { port } = await server({ writeTimeoutMs: 500 });
    const bystander = await connect(port);
    const sink = await connect(port);
    sink.socket.pause(); // never reads
    const request = 'R some-key 1\n'.repeat(1_000);
    let sent = 0;
    const pump = (): void => {
      // 40 MB of requests, far beyond every socket buffer on the way.
      while (sent < 3_000 && !sink.closed) {
        sent++;
        if (!sink.socket.write(request)) {
          sink.socket.once('drain', pump);
          return;
        }
      }
    };
    pump();
    await until(() => backpressure.some((e) => e.paused), 'the server to pause the reader', 20_000);
    // Meanwhile everyone else is served.
    bystander.write('A k b 0\n');
    expect(await bystander.readLine()).toMatch(/^A \d+ b k$/);
    await until(() => disconnects.some((e) => e.reason === 'write-timeout'), 'the cut-off', 20_000);
    await sink.waitClosed(10_000);
    const peak = Math.max(...backpressure.map((e) => e.bufferedBytes));
    expect(peak).toBeLessThan(1_000_000); // bounded: 64 KiB high water plus one chunk's replies
    expect(sent * request.length).toBeGreaterThan(10 * peak);
    bystander.write('R k 1\n');
    expect(await bystander.readLine()).toBe('N 1 k');
  });
});

describe('idle and unfinished connections are cut (no secret needed)', () => {
  test('--max-connections idle sockets lock real clients out only until the idle timeout', async () => {
    const disconnects = subscribeDisconnects();
    // Long enough for all 101 to connect on a loaded machine before the first is cut.
    const { port } = await server({ maxConnections: 100, idleTimeoutMs: 2_000 });
    const squatters = await Promise.all(Array.from({ length: 100 }, () => connect(port)));
    const refused = await connect(port);
    expect(await refused.readLine()).toBe('E capacity too many connections');
    // Cut quietly (a FIN, no reply), all of them.
    await Promise.all(squatters.map((s) => s.waitClosed(5_000)));
    for (const s of squatters) expect(s.received.length).toBe(0);
    await until(
      () => disconnects.filter((d) => d.reason === 'idle').length === 100,
      'the server to see them closed',
      5_000,
    );
    const real = await connect(port);
    real.write('A k real 0\n');
    expect(await real.readLine()).toMatch(/^A \d+ real k$/);
  });

  test('a half-sent line is closed after the line timeout, even while it trickles; finished lines are not', async () => {
    const disconnects = subscribeDisconnects();
    const { port } = await server({ lineTimeoutMs: 300, idleTimeoutMs: 60_000 });
    const half = await connect(port);
    half.write('A k o');
    const trickle = await connect(port);
    trickle.write('A');
    let trickling = true;
    void (async () => {
      while (trickling && !trickle.closed) {
        trickle.write('k');
        await sleep(40);
      }
    })();
    const slow = await connect(port);
    slow.write('A j s');
    await sleep(150);
    slow.write(' 0\n'); // finished within the timeout: served
    expect(await slow.readLine()).toMatch(/^A \d+ s j$/);
    for (const c of [half, trickle]) {
      expect(await c.readLine(5_000)).toBe('E bad_request no end of line within 300 ms');
      await c.waitClosed();
    }
    trickling = false;
    await until(
      () => disconnects.filter((d) => d.reason === 'line-timeout').length === 2,
      'the server to see them closed',
      5_000,
    );
    // Whole lines now and then keep a connection alive past the line timeout.
    for (let i = 0; i < 4; i++) {
      await sleep(150);
      slow.write(`A j${i} s 0\n`);
      expect(await slow.readLine()).toMatch(new RegExp(`^A \\d+ s j${i}$`));
    }
    expect(slow.closed).toBe(false);
  });

  test('a queued waiter is not idle, nor a holder within its lease: its idle time counts from the lease end', async () => {
    const { port } = await server({ idleTimeoutMs: 300, leaseMs: 1_500 });
    const holder = await connect(port);
    const heldAt = Date.now(); // the lease counts from when the server reads the request: later
    holder.write('A k h 0\n');
    expect(await holder.readLine()).toMatch(/^A \d+ h k$/);
    const waiter = await connect(port);
    waiter.write('A k w 10000\n');
    await sleep(900);
    expect(holder.closed).toBe(false);
    expect(waiter.closed).toBe(false);
    // The lease runs out: the waiter gets the key at the expiry, the holder's connection is cut
    // (quietly) an idle timeout later.
    expect(await waiter.readLine(5_000)).toMatch(/^A \d+ w k$/);
    await holder.waitClosed(5_000);
    expect(Date.now() - heldAt).toBeGreaterThanOrEqual(1_500 + 300);
    expect(holder.lines.length).toBe(1);
    expect(waiter.closed).toBe(false); // it holds the key now
  });
});

describe('authentication (shared secret)', () => {
  test('H <secret> first: no reply, then requests are served', async () => {
    const { port } = await server({ secret: 'opensesame' });
    const c = await connect(port);
    c.write('H opensesame\nA k o 0\n');
    expect(await c.readLine()).toMatch(/^A \d+ o k$/);
    expect(c.lines.length).toBe(1);
  });

  test('a wrong secret, a missing H, or a late H: E auth_failed / bad_request and close; nothing runs', async () => {
    const { port, server: s } = await server({ secret: 'opensesame' });
    const wrong = await connect(port);
    wrong.write('H guess\nA k1 o 0\n');
    expect(await wrong.readLine()).toBe('E auth_failed');
    await wrong.waitClosed();
    const missing = await connect(port);
    missing.write('A k2 o 0\n');
    expect(await missing.readLine()).toBe('E auth_failed');
    await missing.waitClosed();
    const late = await connect(port);
    late.write('H opensesame\nH opensesame\n');
    expect(await late.readLine()).toBe('E bad_request H must be the first line');
    expect(s.inspect('k1')).toBeUndefined();
    expect(s.inspect('k2')).toBeUndefined();
  });

  test('a connection that never authenticates is closed after the auth timeout', async () => {
    const { port } = await server({ secret: 'opensesame', authTimeoutMs: 150 });
    const c = await connect(port);
    expect(await c.readLine()).toBe('E auth_failed no H line in time');
    await c.waitClosed();
  });

  test('a server without a secret accepts (and ignores) H as the first line only', async () => {
    const { port } = await server();
    const c = await connect(port);
    c.write('H anything\nA k o 0\nH again\n');
    expect(await c.readLine()).toMatch(/^A \d+ o k$/);
    expect(await c.readLine()).toBe('E bad_request H must be the first line');
  });
});

describe('draining (close)', () => {
  test('queued requests get T, every connection gets E not_active and is closed, new ones are refused', async () => {
    const s = new TicketServer({ port: 0 });
    const { port } = await s.listen();
    const holder = await LineSocket.connect(port);
    const waiter = await LineSocket.connect(port);
    holder.write('A k h 0\n');
    await holder.readLine();
    waiter.write('A k w 60000\n');
    await until(() => s.inspect('k')?.waiters.length === 1);
    await s.close();
    expect(await waiter.readLines(2)).toEqual(['T w k', 'E not_active shutting down']);
    expect(await holder.readLine()).toBe('E not_active shutting down');
    await waiter.waitClosed();
    await holder.waitClosed();
    await expect(LineSocket.connect(port)).rejects.toThrow();
  });
});

describe('options', () => {
  test('are validated up front', () => {
    expect(() => new TicketServer({ port: 70_000 })).toThrow(RangeError);
    expect(() => new TicketServer({ leaseMs: 0 })).toThrow(RangeError);
    expect(() => new TicketServer({ maxLineBytes: 10 })).toThrow(RangeError);
    expect(() => new TicketServer({ secret: 'has space' })).toThrow(RangeError);
    expect(() => new TicketServer({ maxConnections: 1.5 })).toThrow(RangeError);
    expect(() => new TicketServer({ idleTimeoutMs: 0 })).toThrow(RangeError);
    expect(() => new TicketServer({ lineTimeoutMs: 2 ** 31 })).toThrow(RangeError);
    expect(() => new TicketServer({ idleTimeoutMs: '30s' as unknown as number })).toThrow(TypeError);
    expect(() => new TicketServer({ host: 5 as unknown as string })).toThrow(TypeError);
    expect(() => new TicketServer(null as unknown as TicketServerOptions)).toThrow(TypeError);
  });
});

/** Waits for `condition` on turns of the event loop (the faked timers never fire by themselves),
 * bounded by the wall clock, which is not faked. */
async function untilOnLoop(condition: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setImmediate(resolve));
  }
}

describe('defaults the docs promise, on a server given no value for them', () => {
  // The sweep and the auth timeout on fake timers (real time would make these tests that slow),
  // TCP keep-alive by the kernel's own account of the server's socket (/proc/net/tcp).
  test('an expired key without waiters is swept every 5 s', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    let now = 1_700_000_000_000;
    const { port, server: s } = await server({ leaseMs: 1_000, clock: () => now });
    const c = await connect(port);
    c.write('A k o 0\n');
    tokenOf(await c.readLine());
    now += 1_000; // expired, and nobody asks for it
    vi.advanceTimersByTime(4_999);
    expect(s.inspect('k')).toBeDefined();
    vi.advanceTimersByTime(1);
    expect(s.inspect('k')).toBeUndefined();
  });

  test('with a secret, a connection that sends no H is closed after 10 s', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const { port, server: s } = await server({ secret: 'opensesame' });
    const c = await connect(port);
    await untilOnLoop(() => s.stats().connections === 1, 'the server to accept the connection');
    vi.advanceTimersByTime(9_999);
    await new Promise((resolve) => setImmediate(resolve));
    expect(c.received.length).toBe(0);
    expect(c.closed).toBe(false);
    vi.advanceTimersByTime(1);
    // readLine's own bound is a faked timer too: wait on the loop instead.
    await untilOnLoop(() => c.closed, 'the connection to close');
    expect(c.lines).toEqual(['E auth_failed no H line in time']);
  });

  test("TCP keep-alive is on for the server's connections, first probe after 30 s idle", async () => {
    const { port, server: s } = await server();
    const c = await connect(port);
    await untilOnLoop(() => s.stats().connections === 1, 'the server to accept the connection');
    // /proc/net/tcp: local and remote address as hex ip:port, then the timer (2: keep-alive) and
    // when it fires, in clock ticks.
    const hexPort = (n: number): string => n.toString(16).toUpperCase().padStart(4, '0');
    const row = readFileSync('/proc/net/tcp', 'utf8')
      .split('\n')
      .map((line) => line.trim().split(/\s+/))
      .find(
        (fields) =>
          fields[1] === `0100007F:${hexPort(port)}` && fields[2] === `0100007F:${hexPort(c.socket.localPort!)}`,
      );
    expect(row, 'the server side of the connection in /proc/net/tcp').toBeDefined();
    const [timer, when] = row![5]!.split(':');
    expect(timer).toBe('02');
    const ticksPerSecond = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }));
    const firstProbeMs = (parseInt(when!, 16) / ticksPerSecond) * 1_000;
    expect(firstProbeMs).toBeGreaterThan(20_000);
    expect(firstProbeMs).toBeLessThanOrEqual(30_000);
  });
});
