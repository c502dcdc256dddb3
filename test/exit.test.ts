// Process exit and the addon's threads. A waiting process's watcher thread sits in flock and
// cannot be cancelled; when the process exits by itself, Node tears down the environment — and
// deletes the addon's threadsafe function — while that thread may be waking up (someone released
// the lock at that moment). It must then stay away from it: before the fix, 6–9 % of such
// processes died of SIGABRT (uv_async_send on a closed handle) or SIGSEGV.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect, test } from 'vitest';
import { Lease } from '../src/flock/lease.js';
import { freshDir } from './helpers/dirs.js';

const CHILD = fileURLToPath(new URL('./fixtures/exit-while-watching.mjs', import.meta.url));

test('processes exiting while their watcher thread wakes up never crash', async () => {
  const dir = freshDir('/dev/shm');
  const lease = new Lease(dir);
  let stop = false;
  // The holder releases and re-acquires all the time: every release wakes the blocked threads.
  const churn = (async () => {
    while (!stop) {
      const grant = await lease.acquire('s1', 'holder', { waitMs: 60_000 });
      await new Promise((resolve) => setTimeout(resolve, Math.random() * 3));
      await lease.release(grant);
    }
  })();
  const outcomes: Record<string, number> = {};
  const total = 150;
  let started = 0;
  const runOne = (): Promise<void> =>
    new Promise((resolve) => {
      const child = spawn(process.execPath, [CHILD, dir], { stdio: 'ignore' });
      child.on('exit', (code, signal) => {
        const outcome = signal ?? `exit ${code}`;
        outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
        resolve();
      });
    });
  await Promise.all(
    Array.from({ length: 6 }, async () => {
      while (started < total) {
        started++;
        await runOne();
      }
    }),
  );
  stop = true;
  await churn;
  expect(outcomes).toEqual({ 'exit 0': total });
}, 120_000);
