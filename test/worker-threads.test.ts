// Leases in worker threads: each thread's environment has its own watch state in the addon (an
// inotify handle on its own event loop, its own dispatcher). Terminating a worker while it waits,
// or while it holds a lease handed to it, tears that state down and leaves the process and the
// other threads' leases working.
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { expect, test } from 'vitest';
import { Lease } from '../src/flock/lease.js';
import { freshDir } from './helpers/dirs.js';

const WORKER = fileURLToPath(new URL('./fixtures/waiting-worker.mjs', import.meta.url));

function nextMessage(worker: Worker): Promise<unknown> {
  return once(worker, 'message').then(([message]) => message as unknown);
}

test('workers terminated while waiting, or while holding a handed-over lease, leave the process working', async () => {
  const dir = freshDir('/dev/shm');
  const lease = new Lease(dir);
  let grant = await lease.acquire('s1', 'main');
  for (let n = 0; n < 6; n++) {
    const worker = new Worker(WORKER, { workerData: { dir, n } });
    expect(await nextMessage(worker)).toBe('waiting');
    await new Promise((resolve) => setTimeout(resolve, 100)); // asleep on the main thread's .live
    if (n % 2 === 0) {
      // Terminated while waiting: its watch ends with its environment.
      await worker.terminate();
    } else {
      // Handed over to the worker (its event loop woken by the release), then terminated holding it.
      const acquired = nextMessage(worker);
      await lease.release(grant);
      expect(await acquired).toBe('acquired');
      await worker.terminate();
      // Its thread is gone, so is its lock: the main thread takes the lease over at once.
      grant = await lease.acquire('s1', 'main', { waitMs: 5_000 });
    }
  }
  await lease.release(grant);
  // The main thread's own waits still work after the workers' teardown.
  const other = new Lease(dir);
  const held = await other.acquire('s2', 'a');
  const waiting = lease.acquire('s2', 'b', { waitMs: 5_000 });
  await new Promise((resolve) => setTimeout(resolve, 50));
  await other.release(held);
  expect((await waiting).owner).toBe('b');
}, 60_000);
