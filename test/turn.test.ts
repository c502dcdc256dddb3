// Operations that complete without the event loop turning (the file lease on tmpfs, MemoryLease)
// must not starve a caller that awaits them back to back: timers and I/O still run.
import { describe, expect, test } from 'vitest';
import { Lease } from '../src/flock/lease.js';
import { MemoryLease } from '../src/memory/memory-lease.js';
import type { SessionLease } from '../src/port/types.js';
import { freshDir } from './helpers/dirs.js';

/** How late a 1 ms timer set before `loop` fired, and how long `loop` took. */
async function timerDuring(loop: () => Promise<void>): Promise<{ firedAtMs: number; loopMs: number }> {
  const started = performance.now();
  let firedAtMs = Infinity;
  setTimeout(() => (firedAtMs = performance.now() - started), 1);
  await loop();
  return { firedAtMs, loopMs: performance.now() - started };
}

const backends: Array<[string, () => SessionLease]> = [
  ['Lease on tmpfs', () => new Lease(freshDir('/dev/shm'))],
  ['MemoryLease', () => new MemoryLease()],
];

describe.each(backends)('%s', (_name, create) => {
  test('a loop of awaited acquire + release lets timers run', async () => {
    const lease = create();
    const { firedAtMs, loopMs } = await timerDuring(async () => {
      const until = performance.now() + 100;
      for (let i = 0; performance.now() < until; i++) await lease.release(await lease.acquire(`s${i % 4}`, 'me'));
    });
    expect(loopMs).toBeGreaterThan(50); // long enough to matter
    expect(firedAtMs).toBeLessThan(loopMs / 4); // not starved until the loop ended
  });

  test('a polling loop of refused acquires lets timers run', async () => {
    const lease = create();
    await lease.acquire('s1', 'holder');
    const { firedAtMs, loopMs } = await timerDuring(async () => {
      const until = performance.now() + 100;
      while (performance.now() < until) await lease.acquire('s1', 'poller').catch(() => {});
    });
    expect(firedAtMs).toBeLessThan(loopMs / 4);
  });
});
