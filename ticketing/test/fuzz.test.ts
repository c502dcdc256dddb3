/**
 * Protocol fuzz: random and mutated request lines, in random chunkings, over many connections.
 * The server must survive, answer only well-formed lines (an E last, then close), and every other
 * connection — a client doing real work throughout — must be unaffected.
 */
import { afterEach, expect, test } from 'vitest';
import { TicketClient } from '../src/client.js';
import { parseReply } from '../src/protocol.js';
import { LineSocket, prng, sleep, startServer, until } from './helpers.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

const VALID = ['A k1 o1 0', 'A k1 o2 50', 'A k2 o3 0', 'R k1 1', 'R k2 18446744073709551615', 'H x', 'A hot fuzz 20'];

function fuzzLine(rand: () => number): Buffer {
  const pick = <T>(items: readonly T[]): T => items[Math.floor(rand() * items.length)]!;
  const base = Buffer.from(pick(VALID), 'latin1');
  switch (Math.floor(rand() * 10)) {
    case 0: // random bytes
      return Buffer.from(Array.from({ length: Math.floor(rand() * 40) }, () => Math.floor(rand() * 256)));
    case 1: {
      // flip a byte
      const b = Buffer.from(base);
      b[Math.floor(rand() * b.length)] = Math.floor(rand() * 256);
      return b;
    }
    case 2: // truncate
      return base.subarray(0, Math.floor(rand() * base.length));
    case 3: // double a space / add a field
      return Buffer.from(base.toString('latin1').replace(' ', rand() < 0.5 ? '  ' : ' extra '), 'latin1');
    case 4: // absurd numbers
      return Buffer.from(
        pick(['A k o 99999999999999999999', 'R k 0', 'R k -1', 'A k o 1e3', 'R k 18446744073709551616', 'A k o 007']),
        'latin1',
      );
    case 5: // very long
      return Buffer.from(`A ${'x'.repeat(Math.floor(rand() * 3000))} o 0`, 'latin1');
    case 6: // a \r in the middle, or NULs
      return Buffer.from(base.toString('latin1').replace(' ', rand() < 0.5 ? '\r' : '\u0000'), 'latin1');
    default:
      return base; // valid lines in between keep the state machine busy
  }
}

test('random and mutated lines: the server survives and everyone else is unaffected', { timeout: 60_000 }, async () => {
  const seed = Number(process.env.FUZZ_SEED ?? Date.now() % 1_000_000);
  const rand = prng(seed);
  const started = await startServer({ maxLineBytes: 256, maxWaitersPerKey: 5, writeTimeoutMs: 2_000 });
  cleanups.push(started.close);
  const { port, server } = started;

  // The bystander: real work, all through the fuzz.
  const bystander = new TicketClient({ port });
  cleanups.push(() => bystander.destroy());
  let stop = false;
  let cycles = 0;
  const errors: unknown[] = [];
  const work = (async () => {
    while (!stop) {
      try {
        const r = await bystander.acquire(`safe-${cycles % 7}`, { waitMs: 0 });
        if (r.status !== 'acquired') throw new Error(`bystander got ${r.status}`);
        const rel = await bystander.release(r.key, r.token);
        if (rel.status !== 'released') throw new Error(`bystander release got ${rel.status}`);
        cycles++;
      } catch (error) {
        errors.push(error);
        return;
      }
    }
  })();

  let connections = 0;
  let lines = 0;
  let errorsSeen = 0;
  const fuzzers = Array.from({ length: 8 }, async () => {
    for (let round = 0; round < 12; round++) {
      const socket = await LineSocket.connect(port);
      connections++;
      const payload: Buffer[] = [];
      const count = 1 + Math.floor(rand() * 30);
      for (let i = 0; i < count; i++) {
        payload.push(fuzzLine(rand), Buffer.from(rand() < 0.9 ? '\n' : '\r\n'));
        lines++;
      }
      const bytes = Buffer.concat(payload);
      // Random chunking, so lines split anywhere.
      for (let at = 0; at < bytes.length && !socket.closed;) {
        const n = 1 + Math.floor(rand() * 64);
        socket.write(bytes.subarray(at, at + n));
        at += n;
        if (rand() < 0.2) await sleep(1);
      }
      await sleep(30 + Math.floor(rand() * 50));
      // Everything received must be well-formed; an E must be the last line, then the close.
      const received = socket.received.toString('latin1');
      const replyLines = received.split('\n');
      expect(replyLines.pop()).toBe('');
      replyLines.forEach((line, i) => {
        const reply = parseReply(line.replace(/\r$/, ''));
        expect(reply, `seed ${seed}: reply ${JSON.stringify(line)}`).toBeDefined();
        if (reply!.op === 'E') {
          errorsSeen++;
          expect(i, `seed ${seed}: E must be the last line`).toBe(replyLines.length - 1);
        }
      });
      if (replyLines.at(-1)?.startsWith('E ')) await socket.waitClosed();
      socket.destroy();
    }
  });
  await Promise.all(fuzzers);
  await sleep(100);
  stop = true;
  await work;

  expect(errors, `seed ${seed}`).toEqual([]);
  expect(cycles).toBeGreaterThan(50);
  expect(connections).toBe(96);
  expect(lines).toBeGreaterThan(500);
  expect(errorsSeen).toBeGreaterThan(10);
  // The fuzzers are gone: none of their queued requests is left behind.
  await until(
    () => server.stats().waiters === 0 && server.stats().connections <= 2,
    'fuzz connections to be cleaned up',
    5_000,
  );
  // And the server still serves new connections.
  const after = await LineSocket.connect(port);
  cleanups.push(() => after.destroy());
  after.write('A fresh-key o 0\n');
  expect(await after.readLine()).toMatch(/^A \d+ o fresh-key$/);
});
