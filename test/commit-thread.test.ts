// The commit thread (native/flocklease.c): a durable commit runs on one thread of the
// environment's own while that thread is free, and on libuv's pool while it is busy. These tests
// check what that must not cost: commits of several ids still run side by side, the thread keeps
// no process alive, and it ends with its environment (a worker thread), abandoning a commit under
// way the way a process's death would.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { afterEach, expect, test } from 'vitest';
import { faults } from '../src/flock/io.js';
import { Lease } from '../src/flock/lease.js';
import { freshDir } from './helpers/dirs.js';
import { readRecordFile } from './helpers/lease-files.js';

const WORKER = fileURLToPath(new URL('./fixtures/committing-worker.mjs', import.meta.url));
const EXITING = fileURLToPath(new URL('./fixtures/exit-after-commit.mjs', import.meta.url));
const THREAD_NAME = 'flocklease-cmt';

afterEach(() => faults.clear());

/** This process's threads named as the commit thread. */
function commitThreads(): number {
  return readdirSync('/proc/self/task').filter((tid) => {
    try {
      return readFileSync(`/proc/self/task/${tid}/comm`, 'utf8').trim() === THREAD_NAME;
    } catch {
      return false; // the thread ended meanwhile
    }
  }).length;
}

/** Resolves once `dir` holds a commit's temp file (the commit is under way), within 10 s. */
async function commitUnderWay(dir: string): Promise<void> {
  for (let waited = 0; waited < 10_000; waited += 5) {
    if (readdirSync(dir).some((name) => name.endsWith('.tmp'))) return;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  throw new Error(`no commit under way in ${dir}`);
}

test('one commit thread per environment, started by the first disk commit', async () => {
  const lease = new Lease(freshDir());
  const before = commitThreads();
  for (let i = 0; i < 5; i++) await lease.release(await lease.acquire(`s${i}`, 'alice'));
  expect(before).toBeLessThanOrEqual(1); // another test of this file may have started it
  expect(commitThreads()).toBe(1);
});

test('a commit that arrives while the commit thread is busy runs beside it, on the pool', async () => {
  const dir = freshDir();
  const lease = new Lease(dir);
  await lease.release(await lease.acquire('warm-up', 'alice')); // the thread is up and free
  faults.stall('temp.fsync', 2_000, 1); // the next commit sits in fsync for 2 s
  let firstDone = false;
  const first = lease.acquire('s1', 'alice').finally(() => (firstDone = true));
  await commitUnderWay(dir);
  const second = await lease.acquire('s2', 'bob');
  // Queued behind the stalled commit it would have waited the 2 s out.
  expect(firstDone).toBe(false);
  expect(readRecordFile(dir, 's2')).toMatchObject({ owner: 'bob', token: second.token });
  const grant = await first;
  expect(readRecordFile(dir, 's1')).toMatchObject({ owner: 'alice', token: grant.token });
});

test('the commit thread keeps no process alive: it exits by itself, also with a commit under way at process.exit', async () => {
  const dir = freshDir();
  for (const mode of ['idle', 'mid-commit']) {
    const child = spawn(process.execPath, [EXITING, dir, mode], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 15_000); // a hang fails below as SIGKILL
    const [code, signal] = (await once(child, 'exit')) as [number | null, NodeJS.Signals | null];
    clearTimeout(timer);
    expect({ mode, code, signal, stderr }).toEqual({ mode, code: 0, signal: null, stderr: '' });
  }
}, 40_000);

test('a worker terminated during a commit: its thread ends, and the lease is free at once', async () => {
  const dir = freshDir();
  const lease = new Lease(dir);
  await lease.release(await lease.acquire('warm-up', 'main')); // this environment's thread
  const threadsBefore = commitThreads();
  const worker = new Worker(WORKER, { workerData: { dir } });
  const [message] = (await once(worker, 'message')) as [string];
  expect(message).toBe('committed'); // its first commit ran: its own thread is up
  expect(commitThreads()).toBe(threadsBefore + 1);
  faults.stall('temp.fsync', 1_000, 1); // its next commit (an acquire of s1) stalls in fsync
  worker.postMessage('acquire');
  await commitUnderWay(dir);
  await worker.terminate();
  // The commit finishes after its environment is gone: abandoned, its new generation's lock
  // closed, as if the worker's process had died: the main thread takes s1 over without waiting
  // for any expiry.
  const grant = await lease.acquire('s1', 'main', { waitMs: 5_000 });
  expect(grant.owner).toBe('main');
  for (let waited = 0; commitThreads() > threadsBefore && waited < 10_000; waited += 10) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  expect(commitThreads()).toBe(threadsBefore);
  await lease.release(grant);
}, 30_000);
