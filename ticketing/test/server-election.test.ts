/**
 * Election against the single-mode server over real sockets: publish (`P`), observe (`O`), the
 * pushed views (`V`) in rev order through grants, hand-offs, releases and expiries, unobserve
 * (`U`), the observation limits, the idle timeout, and an observer that stops reading.
 */
import { afterEach, describe, expect, test } from 'vitest';
import type { TicketServerOptions } from '../src/server/server.js';
import { LineSocket, sleep, startServer, tokenOf, until } from './helpers.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

async function server(options: TicketServerOptions = {}) {
  const started = await startServer(options);
  cleanups.push(started.close);
  return started;
}

async function connect(port: number): Promise<LineSocket> {
  const socket = await LineSocket.connect(port);
  cleanups.push(() => socket.destroy());
  return socket;
}

/** Two connections: `holder` holds `k` (owner `w`) under `token`, and `observer` observes it (its
 * first `V` read). */
async function heldAndObserved(port: number): Promise<{ observer: LineSocket; holder: LineSocket; token: bigint }> {
  const [observer, holder] = await Promise.all([connect(port), connect(port)]);
  holder.write('A k w 0\n');
  const token = tokenOf(await holder.readLine());
  observer.write('O k\n');
  await observer.readLine();
  return { observer, holder, token };
}

/** A `V` line's rev. */
const revOf = (line: string): bigint => BigInt(line.split(' ')[2]!);

describe('O and V', () => {
  test('the state at once, then every change in rev order: grant, publish, release', async () => {
    const { port, server: s } = await server();
    const observer = await connect(port);
    const holder = await connect(port);
    observer.write('O svc\n');
    const first = await observer.readLine();
    expect(first).toMatch(/^V svc (0|[1-9][0-9]*) -$/);
    holder.write('A svc w1 0\n');
    const token = tokenOf(await holder.readLine());
    expect(await observer.readLine()).toBe(`V svc ${token} ${token} w1`);
    expect(token).toBeGreaterThan(revOf(first));
    holder.write(`P svc ${token} 10.0.0.5:8080 zone a\n`);
    expect(await holder.readLine()).toBe(`P ${token} svc`);
    expect(await observer.readLine()).toBe(`V svc ${token + 1n} ${token} w1 10.0.0.5:8080 zone a`);
    holder.write(`R svc ${token}\n`);
    expect(await holder.readLine()).toBe(`R ${token} svc`);
    expect(await observer.readLine()).toBe(`V svc ${token + 2n} -`);
    // Observing again re-sends the state; a new observer gets it too, and creates nothing.
    observer.write('O svc\n');
    expect(await observer.readLine()).toBe(`V svc ${token + 2n} -`);
    const late = await connect(port);
    const keys = s.stats().keys;
    late.write('O other\n');
    expect(await late.readLine()).toMatch(/^V other [0-9]+ -$/);
    expect(s.inspect('other')).toBeUndefined();
    expect(s.stats()).toMatchObject({ keys, waiters: 0, observations: 2 });
    await observer.expectSilence(50);
  });

  test('a hand-off is one change: the observer sees the next holder, never a vacancy between', async () => {
    const { port } = await server();
    const [observer, a, b] = await Promise.all([connect(port), connect(port), connect(port)]);
    a.write('A k a 0\n');
    const t1 = tokenOf(await a.readLine());
    a.write(`P k ${t1} here\n`);
    await a.readLine();
    observer.write('O k\n');
    expect(await observer.readLine()).toBe(`V k ${t1 + 1n} ${t1} a here`);
    b.write('A k b 5000\n');
    await sleep(20);
    a.write(`R k ${t1}\n`);
    const t2 = tokenOf(await b.readLine());
    expect(await observer.readLine()).toBe(`V k ${t1 + 2n} ${t2} b`); // a new grant starts with no value
    await observer.expectSilence(50);
  });

  test('an expiry is pushed when the lease runs out, with no other request', async () => {
    const { port } = await server({ leaseMs: 300 });
    const [observer, holder] = await Promise.all([connect(port), connect(port)]);
    observer.write('O k\n');
    await observer.readLine();
    holder.write('A k w 0\n');
    const token = tokenOf(await holder.readLine());
    expect(await observer.readLine()).toBe(`V k ${token} ${token} w`);
    const at = Date.now();
    expect(await observer.readLine(2_000)).toBe(`V k ${token + 1n} -`);
    expect(Date.now() - at).toBeGreaterThanOrEqual(250);
    // Observed only once held: its expiry is pushed too.
    holder.write('A j w 0\n');
    const held = tokenOf(await holder.readLine());
    const late = await connect(port);
    late.write('O j\n');
    expect(await late.readLine()).toBe(`V j ${held} ${held} w`);
    expect(await late.readLine(2_000)).toBe(`V j ${held + 1n} -`);
  });

  test('shared and semaphore keys: the count of holders', async () => {
    const { port } = await server();
    const [observer, c] = await Promise.all([connect(port), connect(port)]);
    observer.write('O doc\nO gpu\n');
    await observer.readLines(2);
    c.write('A doc r1 0 s\nA doc r2 0 s\nA gpu g1 0 4\n');
    const [r1] = await c.readLines(3);
    expect((await observer.readLines(3)).map((line) => line.replace(/ [0-9]+ /, ' <rev> '))).toEqual([
      'V doc <rev> *1',
      'V doc <rev> *2',
      'V gpu <rev> *1',
    ]);
    // Publish is for an exclusive holder: a shared one is answered G, and nothing changes.
    c.write(`P doc ${tokenOf(r1!)} v\n`);
    expect(await c.readLine()).toBe(`G ${tokenOf(r1!)} doc`);
    await observer.expectSilence(50);
  });
});

describe('P', () => {
  test('a stale token, an unknown key and an expired grant are answered G, and no V follows', async () => {
    const { port, server: s } = await server({ leaseMs: 200 });
    const { observer, holder: c, token } = await heldAndObserved(port);
    c.write(`P k ${token + 1n} v\nP nope ${token} v\n`);
    expect(await c.readLines(2)).toEqual([`G ${token + 1n} k`, `G ${token} nope`]);
    await observer.expectSilence(50);
    expect(s.inspect('k')!.holders[0]!.value).toBeUndefined();
    await observer.readLine(2_000); // the expiry
    c.write(`P k ${token} v\n`);
    expect(await c.readLine()).toBe(`G ${token} k`);
  });

  test('a malformed P is E bad_request and changes nothing', async () => {
    const { port, server: s } = await server();
    const c = await connect(port);
    c.write('A k w 0\n');
    const token = tokenOf(await c.readLine());
    const d = await connect(port);
    d.write(`P k ${token} caf\xe9\n`);
    expect(await d.readLine()).toBe('E bad_request value must be 1-512 bytes of printable ASCII');
    await d.waitClosed();
    expect(s.inspect('k')!.holders[0]!.value).toBeUndefined();
    expect(s.inspect('k')!.rev).toBe(token);
  });
});

describe('U and the limits', () => {
  test('U is confirmed, and no V for the key follows it', async () => {
    const { port } = await server();
    const [observer, c] = await Promise.all([connect(port), connect(port)]);
    observer.write('O k\n');
    await observer.readLine();
    observer.write('U k\nU never-observed\n');
    expect(await observer.readLines(2)).toEqual(['U k', 'U never-observed']);
    c.write('A k w 0\n');
    await c.readLine();
    await observer.expectSilence(50);
  });

  test('an O over a limit is answered "U <key> busy"; one that ends frees its place', async () => {
    const { port } = await server({ maxObservationsPerConnection: 2, maxObservations: 3 });
    const [a, b] = await Promise.all([connect(port), connect(port)]);
    a.write('O k1\nO k2\nO k3\n');
    expect((await a.readLines(3)).map((line) => line.split(' ').slice(0, 2).join(' '))).toEqual([
      'V k1',
      'V k2',
      'U k3',
    ]);
    expect(a.lines[2]).toBe('U k3 busy');
    b.write('O k1\nO k4\n');
    expect(await b.readLine()).toMatch(/^V k1 /);
    expect(await b.readLine()).toBe('U k4 busy'); // 3 in total
    a.write('U k1\n');
    await a.readLine();
    b.write('O k4\n');
    expect(await b.readLine()).toMatch(/^V k4 /);
  });

  test('an observing connection is not idle: the idle timeout does not cut it', async () => {
    const { port } = await server({ idleTimeoutMs: 150 });
    const [observer, idle] = await Promise.all([connect(port), connect(port)]);
    observer.write('O k\n');
    await observer.readLine();
    idle.write('W\n');
    await idle.readLine();
    await idle.waitClosed(2_000);
    await sleep(300);
    expect(observer.closed).toBe(false);
    const c = await connect(port);
    c.write('A k w 0\n');
    const token = tokenOf(await c.readLine());
    expect(await observer.readLine()).toBe(`V k ${token} ${token} w`);
    // Once it observes nothing, it is idle again.
    observer.write('U k\n');
    await observer.readLine();
    await observer.waitClosed(2_000);
  });
});

describe('an observer that stops reading', () => {
  test('is cut off by the write timeout once its output backs up, as any connection is', async () => {
    const { port, server: s } = await server({ writeTimeoutMs: 500 });
    const { observer, holder, token } = await heldAndObserved(port);
    observer.socket.pause();
    const value = 'v'.repeat(500);
    // Until the server has cut it (its observation ends with the connection).
    for (let sent = 0; s.stats().observations > 0 && sent < 200_000; sent += 2_000) {
      holder.write(`P k ${token} ${value}\n`.repeat(2_000));
      await until(() => holder.lines.length >= sent + 2_001, 'publishes answered', 10_000);
    }
    expect(s.stats().observations).toBe(0);
    observer.socket.resume();
    await observer.waitClosed(10_000);
  });

  test('costs bounded memory however fast the key changes, then gets the latest state', async () => {
    const { port } = await server();
    const { observer, holder, token } = await heldAndObserved(port);
    observer.socket.pause();
    const changes = 60_000;
    const value = (i: number) => `${String(i).padStart(8, '0')} ${'v'.repeat(480)}`;
    const before = process.memoryUsage().arrayBuffers;
    let peak = before;
    for (let sent = 0; sent < changes; sent += 2_000) {
      let lines = '';
      for (let i = sent; i < sent + 2_000; i++) lines += `P k ${token} ${value(i)}\n`;
      holder.write(lines);
      await until(() => holder.lines.length >= sent + 2_001, 'publishes answered', 10_000);
      peak = Math.max(peak, process.memoryUsage().arrayBuffers);
    }
    // Without coalescing the server would be holding ~30 MB of V lines for this observer.
    expect(peak - before).toBeLessThan(8 * 1024 * 1024);
    observer.socket.resume();
    const latest = `V k ${token + BigInt(changes)} ${token} w ${value(changes - 1)}`;
    await until(() => observer.lines.at(-1) === latest, 'the latest state', 10_000);
    const revs = observer.lines.map(revOf);
    for (let i = 1; i < revs.length; i++) expect(revs[i]!).toBeGreaterThan(revs[i - 1]!);
    expect(revs.length).toBeLessThan(changes); // intermediate states were left out
  });
});
