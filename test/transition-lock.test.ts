// The spec's inode re-check: a process that flocks a lock file just as prune (or an operator)
// unlinks it must notice it locked a dead inode and retry on the live one. Real processes race
// here; an O_EXCL sentinel created inside every transition catches two processes inside at once.
// And a busy transition lock's wait, which has inotify alone to wake it: it looks again on a timer.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterEach, expect, test } from 'vitest';
import { faults, fileIO } from '../src/flock/io.js';
import { lockTransition } from '../src/flock/transition.js';
import { freshDir } from './helpers/dirs.js';
import { holdElsewhere } from './helpers/holder.js';
import { leaseFiles } from './helpers/lease-files.js';

afterEach(() => faults.clear());

const run = promisify(execFile);
const fixture = (name: string): string => fileURLToPath(new URL(`./fixtures/${name}`, import.meta.url));

test('transitions stay mutually exclusive while the lock file is unlinked and recreated under them', async () => {
  const dir = freshDir('/dev/shm');
  const durationMs = 1_500;
  const workers = ['alice', 'bob', 'carol'].map((owner) =>
    run(process.execPath, [fixture('exclusion-worker.mjs'), dir, 's1', owner, String(durationMs)]),
  );
  const churner = run(process.execPath, [fixture('lock-churner.mjs'), leaseFiles(dir, 's1').lock, String(durationMs)]);
  const results = (await Promise.all(workers)).map(
    ({ stdout }) => JSON.parse(stdout) as { cycles: number; violations: number },
  );
  const { unlinked } = JSON.parse((await churner).stdout) as { unlinked: number };
  expect(unlinked).toBeGreaterThan(20); // the lock file really was pulled out from under them (~1 000 when idle)
  expect(results.reduce((sum, r) => sum + r.cycles, 0)).toBeGreaterThan(50);
  expect(results.map((r) => r.violations)).toEqual([0, 0, 0]);
});

test('a busy transition lock whose release inotify cannot see is still taken: the waiter looks again', async () => {
  const path = leaseFiles(freshDir('/dev/shm'), 's1').lock;
  const holder = await holdElsewhere(path);
  try {
    // Every probe of the watch's inotify side says "held", and its watch has no pool thread.
    faults.fail('watch.probe', 'EWOULDBLOCK', -1);
    const started = performance.now();
    const locking = lockTransition({ io: fileIO, path, sessionId: 's1', deadline: started + 5_000 });
    await new Promise((resolve) => setTimeout(resolve, 100));
    await holder.release();
    const fd = await locking; // a LeaseTimeoutError at the deadline, were nobody to look again
    expect(fd).toBeTypeOf('number');
    fileIO.unlockTransition(fd);
    expect(performance.now() - started).toBeLessThan(5_000);
  } finally {
    await holder.end();
  }
});
