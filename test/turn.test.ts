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

/**
 * Runs `step` back to back for at least 20 ms and until a 1 ms timer set before the loop has fired,
 * for at most 2 s: whether the timer fired while the loop was still running. A loop that starved
 * timers would run for its whole 2 s and see the timer fire only after it ended.
 */
async function timerFiresDuring(step: (i: number) => Promise<void>): Promise<boolean> {
  let fired = false;
  setTimeout(() => (fired = true), 1);
  const started = performance.now();
  const deadline = started + 2_000;
  for (let i = 0; (!fired || performance.now() < started + 20) && performance.now() < deadline; i++) await step(i);
  return fired;
}

const backends: Array<[string, () => SessionLease]> = [
  ['Lease on tmpfs', () => new Lease(freshDir('/dev/shm'))],
  ['MemoryLease', () => new MemoryLease()],
];

describe.each(backends)('%s', (_name, create) => {
  test('a loop of awaited acquire + release lets timers run', async () => {
    const lease = create();
    expect(await timerFiresDuring(async (i) => lease.release(await lease.acquire(`s${i % 4}`, 'me')))).toBe(true);
  });

  test('a polling loop of refused acquires lets timers run', async () => {
    const lease = create();
    await lease.acquire('s1', 'holder');
    expect(
      await timerFiresDuring(() =>
        lease.acquire('s1', 'poller').then(
          () => undefined,
          () => undefined,
        ),
      ),
    ).toBe(true);
  });
});

// How long one operation holds the loop (T3): an operation that begins a run commits in a later
// turn than the one that read the record; the operations of a back-to-back run do not pay that turn.
describe.each(filesystems)('Lease on %s', (_fs, root) => {
  const stopTicking: Array<() => void> = [];
  afterEach(() => {
    for (const stop of stopTicking.splice(0)) stop();
  });

  /** A Lease on `root` and, per commit, whether the loop turned since its transition read the
   * record (`turnedBeforeCommit`) and whether it had turned between the previous commit and that
   * read (`beganRun`: no operation finished since the loop last turned). */
  function observed(): { lease: Lease; turnedBeforeCommit: boolean[]; beganRun: boolean[] } {
    let turns = 0;
    let ticking = true;
    const tick = (): void => {
      turns++;
      if (ticking) setImmediate(tick);
    };
    setImmediate(tick);
    stopTicking.push(() => (ticking = false));
    const turnedBeforeCommit: boolean[] = [];
    const beganRun: boolean[] = [];
    let turnAtRead = -1;
    let turnAtCommit = -1;
    let turnedSinceCommit = true;
    const lease = new Lease(freshDir(root), {
      [kIO]: {
        ...fileIO,
        readRecord(path: string) {
          turnAtRead = turns;
          turnedSinceCommit = turnAtCommit < 0 || turns !== turnAtCommit;
          return fileIO.readRecord(path);
        },
        commit(dir: string, plan: Parameters<typeof fileIO.commit>[1]) {
          turnedBeforeCommit.push(turns !== turnAtRead);
          beganRun.push(turnedSinceCommit);
          // Settled: the operation ends in the same turn (unlock, leave), where a run starts.
          return Promise.resolve(fileIO.commit(dir, plan)).then((result) => {
            turnAtCommit = turns;
            return result;
          });
        },
      },
    } as object);
    return { lease, turnedBeforeCommit, beganRun };
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
    const { lease, turnedBeforeCommit, beganRun } = observed();
    await nextTurn();
    // A run ends after MAX_RUN_MS (turn.ts) however many operations it held, so on a loaded machine
    // any operation may begin one: go on until several operations continued a run.
    for (let i = 0; i < 200 && beganRun.filter((began) => !began).length < 4; i++)
      await lease.release(await lease.acquire(`s${i}`, 'me'));
    expect(beganRun.filter((began) => !began).length).toBeGreaterThanOrEqual(4);
    expect(beganRun[0]).toBe(true);
    // Exactly the operations that began a run split their turn.
    expect(turnedBeforeCommit).toEqual(beganRun);
  });
});
