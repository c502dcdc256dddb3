// The addon's lock watch (LeaseIO.watchUnlock), which wakes every waiting acquire: the kernel's
// inotify event wakes the event loop itself, and a pool thread blocked in flock beside it is the
// exact fallback. Each path is checked by faulting the other one.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, openSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, expect, test } from 'vitest';
import { faults, fileIO } from '../src/flock/io.js';
import { freshDir } from './helpers/dirs.js';

const HOLDER = fileURLToPath(new URL('./fixtures/flock-holder.mjs', import.meta.url));

afterEach(() => faults.clear());

/** A process holding `path` exclusively until `release()` (or `kill()`). */
async function holdElsewhere(path: string) {
  const child = spawn(process.execPath, [HOLDER, path], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const next = async (): Promise<string> => String((await lines.next()).value);
  expect(await next()).toBe('held');
  return {
    async release(): Promise<void> {
      child.stdin.write('release\n');
      expect(await next()).toBe('released');
    },
    async kill(): Promise<void> {
      child.kill('SIGKILL');
      await once(child, 'exit');
    },
    async end(): Promise<void> {
      if (child.exitCode === null && child.signalCode === null) {
        child.stdin.end();
        child.kill('SIGKILL');
        await once(child, 'exit');
      }
    },
  };
}

/** Starts a watch; `fired` counts its reports, `when` resolves at the first. */
function watch(path: string) {
  let fired = 0;
  let report!: (errno: number) => void;
  const when = new Promise<number>((resolve) => (report = resolve));
  const started = fileIO.watchUnlock(path, (errno) => {
    fired++;
    report(errno);
  });
  return { started, when, fired: () => fired };
}

function openFds(): number {
  return readdirSync('/proc/self/fd').length;
}

/** Resolves to 'timeout' unless `promise` settles within `ms`. */
function within<T>(promise: Promise<T>, ms: number): Promise<T | 'timeout'> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), ms)));
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

test('nothing to wait for: a missing file, or one nobody holds', () => {
  const dir = freshDir('/dev/shm');
  expect(watch(join(dir, 'missing.live')).started).toBe(false);
  const free = join(dir, 'free.live');
  writeFileSync(free, '');
  expect(watch(free).started).toBe(false);
});

test.each(['release', 'kill'] as const)('reports once when the holder lets go (%s), not before', async (how) => {
  const path = join(freshDir('/dev/shm'), 'a.live');
  const holder = await holdElsewhere(path);
  try {
    const w = watch(path);
    expect(w.started).toBe(true);
    // Other processes' probes close the file too: each is only a cue to look again.
    for (let i = 0; i < 20; i++) closeSync(openSync(path, 'r'));
    expect(await within(w.when, 200)).toBe('timeout');
    await (how === 'release' ? holder.release() : holder.kill());
    expect(await within(w.when, 5_000)).toBe(0);
    await new Promise((resolve) => setTimeout(resolve, 100)); // the losing side reports too, and is ignored
    expect(w.fired()).toBe(1);
  } finally {
    await holder.end();
  }
});

test('the event loop is woken by inotify: the pool thread stalled, the release is still seen at once', async () => {
  const path = join(freshDir('/dev/shm'), 'b.live');
  const holder = await holdElsewhere(path);
  try {
    faults.stall('watch.flock', 10_000); // the pool thread's blocking flock waits 10 s first
    const w = watch(path);
    expect(w.started).toBe(true);
    await holder.release();
    expect(await within(w.when, 5_000)).toBe(0);
  } finally {
    await holder.end();
  }
});

test('the pool thread is the fallback when the inotify probe cannot see the release', async () => {
  const path = join(freshDir('/dev/shm'), 'c.live');
  const holder = await holdElsewhere(path);
  try {
    // As when the event is read before the kernel has dropped the lock: every probe says "held".
    faults.fail('watch.probe', 'EWOULDBLOCK', -1);
    const fds = openFds();
    const w = watch(path);
    expect(w.started).toBe(true);
    await holder.release();
    expect(await within(w.when, 5_000)).toBe(0);
    // The thread reported first: the watch's inotify side (its descriptor) is gone too.
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(openFds()).toBe(fds);
  } finally {
    await holder.end();
  }
});

test('without inotify (no watch could be added), the pool thread alone reports', async () => {
  const path = join(freshDir('/dev/shm'), 'd.live');
  const holder = await holdElsewhere(path);
  try {
    faults.fail('watch.reopen', 'EMFILE');
    const w = watch(path);
    expect(w.started).toBe(true);
    await holder.kill();
    expect(await within(w.when, 5_000)).toBe(0);
  } finally {
    await holder.end();
  }
});

test('many watches of one inode under different paths each report', async () => {
  const dir = freshDir('/dev/shm');
  const path = join(dir, 'e.live');
  const holder = await holdElsewhere(path);
  try {
    // A hand-off renames a watched .wait file to a .live: one inode, one inotify watch descriptor.
    const links = [path, `/proc/self/root${path}`];
    const watches = links.map((p) => watch(p));
    expect(watches.map((w) => w.started)).toEqual([true, true]);
    await holder.release();
    expect(await within(Promise.all(watches.map((w) => w.when)), 5_000)).toEqual([0, 0]);
  } finally {
    await holder.end();
  }
});
