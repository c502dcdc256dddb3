/** Modes on real sockets (docs/ticketing.md "Modes"): shared/exclusive locks and semaphores,
 * their conflicts, limits, FIFO hand-offs, release, keep and expiry per grant. */
import { afterEach, expect, test } from 'vitest';
import { LineSocket, startServer, tokenOf } from './helpers.js';

const GRANT = /^A (\d+) (\S+) (\S+)$/;
const SEMAPHORE_GRANT = /^A (\d+) (\S+) (\S+) (\d+)$/;

let closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers) await close();
  closers = [];
});

async function serve(options: Parameters<typeof startServer>[0] = {}) {
  const server = await startServer(options);
  closers.push(server.close);
  const connect = async (): Promise<LineSocket> => {
    const socket = await LineSocket.connect(server.port);
    closers.unshift(() => Promise.resolve(socket.destroy()));
    return socket;
  };
  return { ...server, connect };
}

test('shared holders together; an exclusive request waits for all of them; later shared ones queue behind it', async () => {
  const { connect, server } = await serve();
  const [r1, r2, w, r3] = await Promise.all([connect(), connect(), connect(), connect()]);
  r1.write('A data r1 0 s\n');
  const g1 = await r1.readLine();
  r2.write('A data r2 0 s\n');
  const g2 = await r2.readLine();
  expect(g1).toMatch(GRANT);
  expect(g2).toMatch(GRANT);
  expect(tokenOf(g2)).toBeGreaterThan(tokenOf(g1));
  w.write('A data w 5000\n'); // no mode field: exclusive, as today
  await w.expectSilence(50);
  r3.write('A data r3 5000 s\n');
  await r3.expectSilence(50);
  expect(server.inspect('data')!.waiters.map((x) => [x.owner, x.mode])).toEqual([
    ['w', 'x'],
    ['r3', 's'],
  ]);
  r1.write(`R data ${tokenOf(g1)}\n`);
  expect(await r1.readLine()).toBe(`R ${tokenOf(g1)} data`);
  await w.expectSilence(50);
  r2.write(`R data ${tokenOf(g2)}\n`);
  const gw = await w.readLine();
  expect(gw).toMatch(/^A \d+ w data$/);
  await r3.expectSilence(50);
  w.write(`R data ${tokenOf(gw)}\n`);
  const g3 = await r3.readLine();
  expect(g3).toMatch(/^A \d+ r3 data$/);
  expect(tokenOf(g3)).toBeGreaterThan(tokenOf(gw));
});

test('a run of shared waiters is granted together', async () => {
  const { connect } = await serve();
  const [w, a, b] = await Promise.all([connect(), connect(), connect()]);
  w.write('A k w 0 x\n');
  const gw = await w.readLine();
  a.write('A k a 5000 s\n');
  b.write('A k b 5000 s\n');
  await a.expectSilence(30);
  w.write(`R k ${tokenOf(gw)}\n`);
  expect(await a.readLine()).toMatch(/^A \d+ a k$/);
  expect(await b.readLine()).toMatch(/^A \d+ b k$/);
});

test('a semaphore grants N at once with slots, reuses the lowest free slot, and queues the N+1st', async () => {
  const { connect, server } = await serve();
  const s = await connect();
  s.write('A gpu a 0 2\nA gpu b 0 2\nA gpu c 0 2\nA gpu d 5000 2\n');
  const [a, b, c] = await s.readLines(3);
  expect(a).toMatch(/^A \d+ a gpu 0$/);
  expect(b).toMatch(/^A \d+ b gpu 1$/);
  expect(c).toBe('T c gpu');
  expect(server.inspect('gpu')).toMatchObject({ kind: 'semaphore', permits: 2 });
  s.write(`R gpu ${tokenOf(a!)}\n`);
  const [released, d] = await s.readLines(2);
  expect(released).toBe(`R ${tokenOf(a!)} gpu`);
  const [, token, owner, key, slot] = SEMAPHORE_GRANT.exec(d!)!;
  expect([owner, key, slot]).toEqual(['d', 'gpu', '0']);
  expect(BigInt(token!)).toBeGreaterThan(tokenOf(b!));
});

test('a mode that does not fit the key is answered C at once, and the connection stays usable', async () => {
  const { connect } = await serve();
  const s = await connect();
  s.write('A sem a 0 3\nA rw b 0 s\n');
  await s.readLines(2);
  s.write('A sem c 60000 4\nA sem c 60000\nA sem c 60000 s\nA rw c 60000 2\nA other c 0\n');
  expect(await s.readLines(5)).toEqual([
    'C c sem',
    'C c sem',
    'C c sem',
    'C c rw',
    expect.stringMatching(/^A \d+ c other$/) as unknown as string,
  ]);
});

test('a key takes any mode once it has no holder and no waiter', async () => {
  const { connect } = await serve();
  const s = await connect();
  s.write('A k a 0 3\n');
  const g = await s.readLine();
  s.write(`R k ${tokenOf(g)}\nA k b 0 s\n`);
  const [, shared] = await s.readLines(2);
  expect(shared).toMatch(/^A \d+ b k$/);
});

test('limits answer B: shared holders per key, and N above maxPermits', async () => {
  const { connect } = await serve({ maxSharedHolders: 2, maxPermits: 8 });
  const s = await connect();
  s.write('A k a 0 s\nA k b 0 s\nA k c 5000 s\nA j d 0 9\nA j d 0 8\n');
  const lines = await s.readLines(5);
  expect(lines.slice(2, 4)).toEqual(['B c k', 'B d j']);
  expect(lines[4]).toMatch(/^A \d+ d j 0$/);
});

test('a malformed mode is a bad request', async () => {
  const { connect } = await serve();
  const s = await connect();
  s.write('A k o 0 65536\n');
  expect(await s.readLine()).toMatch(/^E bad_request mode must be/);
  await s.waitClosed();
});

test('R and K act on one grant by its exact token; the others are untouched', async () => {
  const { connect, server } = await serve();
  const s = await connect();
  s.write('A k a 0 3\nA k b 0 3\n');
  const [a, b] = await s.readLines(2);
  s.write(`K k ${tokenOf(a!)}\nR k ${tokenOf(b!)}\nR k ${tokenOf(b!)}\n`);
  const [kept, released, again] = await s.readLines(3);
  expect(kept).toMatch(new RegExp(`^K ${tokenOf(a!)} k \\d+$`));
  expect(released).toBe(`R ${tokenOf(b!)} k`);
  expect(again).toBe(`N ${tokenOf(b!)} k`);
  expect(server.inspect('k')!.holders.map((h) => [h.owner, h.slot])).toEqual([['a', 0]]);
});

test('a grant that expires while others wait hands its slot on; a waiter that leaves lets those behind it in', async () => {
  const { connect } = await serve({ leaseMs: 200 });
  const [s, w, r] = await Promise.all([connect(), connect(), connect()]);
  s.write('A sem a 0 1\n');
  const a = await s.readLine();
  s.write('A sem b 5000 1\n');
  const b = await s.readLine(3000); // a's lease runs out: b gets slot 0
  expect(b).toMatch(/^A \d+ b sem 0$/);
  expect(tokenOf(b)).toBeGreaterThan(tokenOf(a));

  s.write('A rw reader 0 s\n');
  await s.readLine();
  w.write('A rw writer 60000\n');
  await w.expectSilence(30);
  r.write('A rw reader2 60000 s\n');
  await r.expectSilence(30);
  w.destroy(); // the writer's connection goes: its queued request leaves, reader2 fits
  expect(await r.readLine()).toMatch(/^A \d+ reader2 rw$/);
});
