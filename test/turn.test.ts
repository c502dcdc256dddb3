// Operations that complete without the event loop turning (the file lease on tmpfs, MemoryLease)
// must not starve a caller that awaits them back to back: timers and I/O still run.
import { setImmediate as nextTurn } from 'node:timers/promises';
import { afterEach, describe, expect, test } from 'vitest';
import { fileIO } from '../src/flock/io.js';
import { kIO, Lease } from '../src/flock/lease.js';
import { MemoryLease } from '../src/memory/memory-lease.js';
import type { SessionLease } from '../src/port/types.js';
import { filesystems, freshDir } from './helpers/dirs.js';
import { waitFiles } from './helpers/lease-files.js';
import { until } from './helpers/until.js';

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

// How long one operation holds the loop (T3): an operation that begins a run commits in a later
// turn than the one that read the record; the operations of a back-to-back run do not pay that turn.
describe.each(filesystems)('Lease on %s', (_fs, root) => {
  const stopTicking: Array<() => void> = [];
  afterEach(() => {
    for (const stop of stopTicking.splice(0)) stop();
  });

  /** A Lease on `root` and, per commit, whether the loop turned since its transition read the record. */
  function observed(): { lease: Lease; turnedBeforeCommit: boolean[] } {
    let turns = 0;
    let ticking = true;
    const tick = (): void => {
      turns++;
      if (ticking) setImmediate(tick);
    };
    setImmediate(tick);
    stopTicking.push(() => (ticking = false));
    const turnedBeforeCommit: boolean[] = [];
    let turnAtRead = -1;
    const lease = new Lease(freshDir(root), {
      [kIO]: {
        ...fileIO,
        readRecord(path: string) {
          turnAtRead = turns;
          return fileIO.readRecord(path);
        },
        commit(dir: string, plan: Parameters<typeof fileIO.commit>[1]) {
          turnedBeforeCommit.push(turns !== turnAtRead);
          return fileIO.commit(dir, plan);
        },
      },
    } as object);
    return { lease, turnedBeforeCommit };
  }

  test('an operation that begins a run lets the loop turn between its read side and its commit', async () => {
    const { lease, turnedBeforeCommit } = observed();
    await nextTurn();
    const grant = await lease.acquire('s1', 'me');
    await nextTurn();
    await lease.renew(grant);
    await nextTurn();
    await lease.release(grant);
    expect(turnedBeforeCommit).toEqual([true, true, true]);
  });

  test('a release that hands the lease to a waiter commits in the turn that read the record', async () => {
    const { lease, turnedBeforeCommit } = observed();
    await nextTurn();
    const grant = await lease.acquire('s1', 'me');
    const waiter = new Lease(lease.dir); // its own open files: another holder as far as flock can tell
    const waiting = waiter.acquire('s1', 'waiter', { waitMs: 10_000 });
    await until(() => waitFiles(lease.dir).length === 1, 'the waiter queued');
    await nextTurn();
    await lease.release(grant);
    expect(await waiting).toMatchObject({ owner: 'waiter' });
    // The acquire began a run and split its turn; the hand-off, begun the same way, did not.
    expect(turnedBeforeCommit).toEqual([true, false]);
  });

  test('the later operations of a back-to-back run commit in the turn that read the record', async () => {
    const { lease, turnedBeforeCommit } = observed();
    await nextTurn();
    for (let i = 0; i < 3; i++) await lease.release(await lease.acquire(`s${i}`, 'me'));
    expect(turnedBeforeCommit).toEqual([true, false, false, false, false, false]);
  });
});
