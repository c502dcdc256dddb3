// The addon's lock watch (LeaseIO.watchUnlock), which wakes every waiting acquire: the kernel's
// inotify event wakes the event loop itself, and a pool thread blocked in flock, started by a close
// that leaves the lock held, is the exact fallback. Each path is checked by faulting the other one.
import { closeSync, openSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { constants } from 'node:os';
import { afterEach, expect, test } from 'vitest';
import { faults, fileIO, type WatchMode } from '../src/flock/io.js';
import { waitForUnlock } from '../src/flock/watch.js';
import { freshDir } from './helpers/dirs.js';
import { holdElsewhere, type Holder } from './helpers/holder.js';
import { isFlocked, leaseFiles, openFdCount } from './helpers/lease-files.js';
import { Agent } from './torture/harness.js';

afterEach(() => faults.clear());

/** Runs `body` while another process holds a fresh tmpfs file `name` exclusively; ends that process after. */
async function whileHeld(name: string, body: (holder: Holder, path: string) => Promise<void>): Promise<void> {
  const path = join(freshDir('/dev/shm'), name);
  const holder = await holdElsewhere(path);
  try {
    await body(holder, path);
  } finally {
    await holder.end();
  }
}

/** Starts a watch (`mode`: see WatchMode); `fired` counts its reports, `when`
 * resolves at the first. */
function watch(path: string, mode?: WatchMode) {
  let fired = 0;
  let report!: (errno: number) => void;
  const when = new Promise<number>((resolve) => (report = resolve));
  const started = fileIO.watchUnlock(
    path,
    (errno) => {
      fired++;
      report(errno);
    },
    mode,
  );
  return { started, when, fired: () => fired };
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
  await whileHeld('a.live', async (holder, path) => {
    const w = watch(path);
    expect(w.started).toBe(true);
    // Other processes' probes close the file too: each is only a cue to look again.
    for (let i = 0; i < 20; i++) closeSync(openSync(path, 'r'));
    expect(await within(w.when, 200)).toBe('timeout');
    await (how === 'release' ? holder.release() : holder.kill());
    expect(await within(w.when, 5_000)).toBe(0);
    await new Promise((resolve) => setTimeout(resolve, 100)); // the losing side reports too, and is ignored
    expect(w.fired()).toBe(1);
  });
});

test('the event loop is woken by inotify: the pool thread stalled, the release is still seen at once', async () => {
  await whileHeld('b.live', async (holder, path) => {
    faults.stall('watch.flock', 10_000); // the pool thread's blocking flock waits 10 s first
    const w = watch(path);
    expect(w.started).toBe(true);
    await holder.release();
    expect(await within(w.when, 5_000)).toBe(0);
  });
});

test('the pool thread is the fallback when the inotify probe cannot see the release', async () => {
  await whileHeld('c.live', async (holder, path) => {
    // As when the event is read before the kernel has dropped the lock: every probe says "held".
    faults.fail('watch.probe', 'EWOULDBLOCK', -1);
    const fds = openFdCount();
    const w = watch(path);
    expect(w.started).toBe(true);
    await holder.release();
    expect(await within(w.when, 5_000)).toBe(0);
    // The thread reported first: the watch's inotify side (its descriptor) is gone too.
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(openFdCount()).toBe(fds);
  });
});

test('the pool thread starts only when a close leaves the lock held, looked at again (a probe, or a long release)', async () => {
  await whileHeld('j.live', async (holder, path) => {
    faults.fail('watch.flock', 'EIO'); // the pool thread's flock, once it runs, reports EIO at once
    const w = watch(path);
    expect(w.started).toBe(true);
    expect(await within(w.when, 300)).toBe('timeout'); // no close yet: no thread, no report
    closeSync(openSync(path, 'r')); // another process's probe: the lock is still held
    expect(await within(w.when, 5_000)).toBe(constants.errno.EIO);
    await holder.release();
  });
});

test('a release its event comes just before (the lock still held at the first look) is seen when the watch looks again', async () => {
  await whileHeld('l.live', async (holder, path) => {
    const w = watch(path);
    expect(w.started).toBe(true);
    faults.stall('watch.flock', 10_000); // a pool thread would report only after 10 s
    faults.fail('watch.probe', 'EWOULDBLOCK'); // the event's probe: the kernel has not dropped the lock yet
    await holder.release();
    expect(await within(w.when, 5_000)).toBe(0);
  });
});

test('a release lets go of its .live before it closes the file: no watch can start after the close’s event and still find it held', async () => {
  // The kernel queues a close's inotify event just before it drops the lock; a watch that started in
  // between would find the lock held and wait for an event already gone (a fair Node floor of two
  // processes, each watching the other's ticket as it was released, hung so within minutes).
  const dir = freshDir('/dev/shm');
  const agent = await Agent.start(dir, { ttlMs: 60_000 });
  const grant = await agent.acquire('s1', 'alice');
  const live = leaseFiles(dir, 's1').live(BigInt(grant.token));
  await agent.must({ op: 'fault', action: 'stop', step: 'unlocked' });
  const released = agent.call({ op: 'release', id: 's1' });
  // Stopped between the unlock and the close that wakes (the release has removed the file).
  await agent.stopped();
  const reopened = agent.reopenPath(`${live} (deleted)`);
  expect(reopened, 'the agent still has its .live open').toBeDefined();
  expect(await isFlocked(reopened!)).toBe(false);
  agent.signal('SIGCONT');
  expect(await released).toMatchObject({ ok: true });
  expect(agent.fdTargets().filter((target) => target.startsWith(dir))).toEqual([]);
});

test('a writers-only watch is not woken by read-only closes (probes), and reports its holder’s close', async () => {
  await whileHeld('m.wait', async (holder, path) => {
    faults.fail('watch.flock', 'EIO'); // a pool thread, once started, would report EIO
    const w = watch(path, 'writers');
    expect(w.started).toBe(true);
    for (let i = 0; i < 5; i++) closeSync(openSync(path, 'r')); // other processes' probes
    expect(await within(w.when, 300)).toBe('timeout');
    faults.clear();
    await holder.release(); // it locked the file through a writable descriptor, as a waiter does
    expect(await within(w.when, 5_000)).toBe(0);
  });
});

test('a pool thread that could not start (no descriptor for it) is started at the next look', async () => {
  await whileHeld('n.live', async (holder, path) => {
    faults.fail('watch.probe', 'EWOULDBLOCK', -1); // only the thread can see the release
    const w = watch(path);
    faults.fail('watch.reopen', 'EMFILE'); // the thread's own descriptor, the first time
    await holder.release();
    expect(await within(w.when, 5_000)).toBe(0);
  });
});

test('without inotify (no watch could be added), the pool thread alone reports', async () => {
  await whileHeld('d.live', async (holder, path) => {
    faults.fail('watch.inotify', 'ENOSPC'); // the user's inotify watches are all in use
    const w = watch(path);
    expect(w.started).toBe(true);
    await holder.kill();
    expect(await within(w.when, 5_000)).toBe(0);
  });
});

test('a cue-only watch has no pool thread: a release the inotify probe cannot see goes unreported', async () => {
  await whileHeld('h.lock', async (holder, path) => {
    faults.fail('watch.probe', 'EWOULDBLOCK', -1); // as the exact watch's fallback test above
    const w = watch(path, 'cue');
    expect(w.started).toBe(true);
    await holder.release();
    expect(await within(w.when, 500)).toBe('timeout'); // an exact watch's thread reports at once
    // Its inotify side still watches: the next close of the file is the cue that finds it free.
    faults.clear();
    closeSync(openSync(path, 'r'));
    expect(await within(w.when, 5_000)).toBe(0);
  });
});

test('without inotify, a cue-only watch still has its pool thread', async () => {
  await whileHeld('i.lock', async (holder, path) => {
    faults.fail('watch.inotify', 'ENOSPC');
    const w = watch(path, 'cue');
    expect(w.started).toBe(true);
    await holder.kill();
    expect(await within(w.when, 5_000)).toBe(0);
  });
});

test('many watches of one inode under different paths each report', async () => {
  await whileHeld('e.live', async (holder, path) => {
    // A hand-off renames a watched .wait file to a .live: one inode, one inotify watch descriptor.
    const links = [path, `/proc/self/root${path}`];
    const watches = links.map((p) => watch(p));
    expect(watches.map((w) => w.started)).toEqual([true, true]);
    await holder.release();
    expect(await within(Promise.all(watches.map((w) => w.when)), 5_000)).toEqual([0, 0]);
  });
});

test('a watch started from the report of another on the same inode is still woken by inotify', async () => {
  await whileHeld('f.live', async (holder, path) => {
    // The pool threads stalled: only inotify can report in time. A watch's inotify side is dropped
    // after its report is delivered, and a watch the report adds on that inode shares its wd.
    faults.stall('watch.flock', 10_000, 2);
    let second!: ReturnType<typeof watch>;
    let ours: number | undefined;
    let added!: () => void;
    const secondAdded = new Promise<void>((resolve) => (added = resolve));
    const first = fileIO.watchUnlock(path, () => {
      ours = fileIO.lockFile(path); // as the next holder would, from within the report
      second = watch(path);
      added();
      setTimeout(() => fileIO.closeFile(ours!), 50);
    });
    expect(first).toBe(true);
    await holder.release();
    expect(await within(secondAdded, 5_000)).toBeUndefined();
    expect(ours).toBeTypeOf('number');
    expect(second.started).toBe(true);
    expect(await within(second.when, 5_000)).toBe(0);
  });
});

test('waitForUnlock ends on a waker, on an abort (with its reason), and at once for an aborted signal', async () => {
  await whileHeld('g.live', async (_holder, path) => {
    const wakers = new Set<() => void>();
    const woken = waitForUnlock(fileIO, path, 10_000, undefined, wakers);
    expect(wakers.size).toBe(1);
    for (const wake of wakers) wake();
    expect(await within(woken, 1_000)).toBeUndefined();
    expect(wakers.size).toBe(0); // a waker removes itself
    // Its timer is cleared just after (setImmediate), so it keeps nobody's process alive.
    const timeouts = (): number => process.getActiveResourcesInfo().filter((kind) => kind === 'Timeout').length;
    const before = timeouts();
    await new Promise((resolve) => setImmediate(resolve));
    expect(timeouts()).toBe(before - 1);

    const controller = new AbortController();
    const aborted = waitForUnlock(fileIO, path, 10_000, controller.signal, wakers);
    const reason = new Error('stop');
    controller.abort(reason);
    await expect(within(aborted, 1_000)).rejects.toBe(reason);
    expect(wakers.size).toBe(0);

    const early = new Error('already');
    await expect(within(waitForUnlock(fileIO, path, 10_000, AbortSignal.abort(early), wakers), 1_000)).rejects.toBe(
      early,
    );
    expect(wakers.size).toBe(0);
  });
});

test('a wait that joins a shared watch after the watch’s first waiter left is woken by the release', async () => {
  await whileHeld('s.live', async (holder, path) => {
    // The first wait ends on its timer; its entry in the shared watch goes on the next turn.
    expect(await within(waitForUnlock(fileIO, path, 20, undefined), 1_000)).toBeUndefined();
    await new Promise((resolve) => setImmediate(resolve));
    // The second joins the same watch, now waited on by it alone.
    const second = waitForUnlock(fileIO, path, 10_000, undefined);
    await holder.release();
    expect(await within(second, 2_000)).toBeUndefined();
  });
});
