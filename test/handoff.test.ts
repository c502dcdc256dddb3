// The hand-off as the woken waiter meets it: one route, under the transition lock. The release
// renamed the waiter's flocked .wait to the new generation's .live and wrote the record naming it;
// the waiter, woken by the release's close, reads the record once and checks that its .live is its
// own .wait (one sameFile). The record's token is read by the one reader (record.ts) at its edges,
// and what the wait leaves behind is tidied up.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, test } from 'vitest';
import { faults, fileIO, type LeaseIO } from '../src/flock/io.js';
import { kIO, Lease } from '../src/flock/lease.js';
import { formatRecord } from '../src/flock/record.js';
import { filesystems, freshDir } from './helpers/dirs.js';
import { holdElsewhere } from './helpers/holder.js';
import { leaseFiles, readRecordFile, waitFiles } from './helpers/lease-files.js';
import { until } from './helpers/until.js';

afterEach(() => faults.clear());

/** fileIO, counting its calls. */
function observedIO(): { io: LeaseIO; calls: Map<string, number> } {
  const calls = new Map<string, number>();
  const io = {} as Record<string, unknown>;
  for (const [name, call] of Object.entries(fileIO) as Array<[string, (...args: unknown[]) => unknown]>) {
    io[name] = (...args: unknown[]) => {
      calls.set(name, (calls.get(name) ?? 0) + 1);
      return call(...args);
    };
  }
  return { io: io as unknown as LeaseIO, calls };
}

/** A holder (its own Lease: its own open files, another process as far as flock can tell) and a
 * waiter queued behind it, watching; `calls` counts the waiter's I/O from then on. */
async function queuedBehindHolder(
  dir: string,
  waiterOptions: { ttlMs?: number; clock?: () => number } = {},
  holderIO: LeaseIO = fileIO,
) {
  const holder = new Lease(dir, { [kIO]: holderIO } as object);
  const held = await holder.acquire('s', 'holder');
  const observed = observedIO();
  const waiter = new Lease(dir, { ...waiterOptions, [kIO]: observed.io } as object);
  const waiting = waiter.acquire('s', 'waiter', { waitMs: 10_000 });
  await until(() => waitFiles(dir).length === 1 && observed.calls.get('watchUnlock') === 1, 'the waiter queued');
  observed.calls.clear();
  return { holder, held, waiter, waiting, ...observed };
}

/** A ghost (another process) holds token 5's .live, as the record says, and a waiter is queued
 * behind it, watching; `calls` counts the waiter's I/O from then on. */
async function queuedBehindGhost(dir: string) {
  const files = leaseFiles(dir, 's');
  fs.writeFileSync(files.record, formatRecord({ owner: 'ghost', token: 5n, expiryMs: Date.now() + 60_000 }));
  const ghost = await holdElsewhere(files.live(5n));
  const observed = observedIO();
  const waiter = new Lease(dir, { [kIO]: observed.io } as object);
  const waiting = waiter.acquire('s', 'waiter', { waitMs: 10_000 });
  waiting.catch(() => {}); // the caller reads the outcome; meanwhile a rejection is never unhandled
  await until(() => waitFiles(dir).length === 1 && observed.calls.get('watchUnlock') === 1, 'the waiter queued');
  observed.calls.clear();
  return { files, ghost, waiter, waiting, ...observed };
}

describe.each(filesystems)('on %s', (_fs, root) => {
  test('a release hands over; the woken waiter reads the record once, under the lock, and holds its .wait as the .live', async () => {
    const dir = freshDir(root);
    const { holder, held, waiter, waiting, calls } = await queuedBehindHolder(dir);
    const waitInode = fs.statSync(join(dir, waitFiles(dir)[0]!)).ino;
    await holder.release(held);
    const grant = await waiting;
    expect(calls.get('tryLockTransition')).toBe(1);
    expect(calls.get('readRecord')).toBe(1);
    expect(calls.get('sameFile')).toBe(1);
    expect(calls.get('commit')).toBeUndefined(); // the releaser wrote the record: the waiter writes nothing
    const record = readRecordFile(dir, 's');
    expect(record).toMatchObject({ owner: 'waiter', token: grant.token, expiryMs: grant.expiry.getTime() });
    expect(fs.statSync(leaseFiles(dir, 's').live(grant.token)).ino).toBe(waitInode);
    // A grant like any other: renewed, then released to nobody.
    const renewed = await waiter.renew(grant);
    expect(renewed.token).toBe(grant.token);
    await waiter.release(renewed);
    expect(readRecordFile(dir, 's')).toMatchObject({ owner: '', token: grant.token });
    expect(waitFiles(dir)).toEqual([]);
  });

  test('a release lets go of the transition lock before the close that wakes the waiter', async () => {
    const dir = freshDir(root);
    const order: string[] = [];
    const holderIO: LeaseIO = {
      ...fileIO,
      unlockTransition: (fd) => (order.push('unlock'), fileIO.unlockTransition(fd)),
      closeFile: (fd) => (order.push('close'), fileIO.closeFile(fd)),
    };
    const { holder, held, waiting } = await queuedBehindHolder(dir, {}, holderIO);
    order.length = 0;
    await holder.release(held);
    // The close of the released .live is what the waiter's watch wakes on: woken before the
    // unlock, it would find the transition lock still held.
    expect(order).toEqual(['unlock', 'close']);
    expect(await waiting).toMatchObject({ owner: 'waiter' });
  });

  test('a holder that dies hands nothing over: the waiter reads the record once, under the lock, and takes over', async () => {
    const dir = freshDir(root);
    const { files, ghost, waiter, waiting, ...observed } = await queuedBehindGhost(dir);
    const waitInode = fs.statSync(join(dir, waitFiles(dir)[0]!)).ino;
    await ghost.kill();
    const grant = await waiting;
    expect(observed.calls.get('tryLockTransition')).toBe(1);
    expect(observed.calls.get('readRecord')).toBe(1);
    expect(grant.token).toBeGreaterThan(5n);
    // Its own .wait file became the new generation's .live (renamed: the same inode), none is left.
    expect(fs.statSync(files.live(grant.token)).ino).toBe(waitInode);
    expect(waitFiles(dir)).toEqual([]);
    expect(fs.existsSync(files.live(5n))).toBe(false);
    expect(readRecordFile(dir, 's')).toMatchObject({ owner: 'waiter', token: grant.token });
    await waiter.release(grant);
  });

  test('a hand-off the waiter’s clock finds expired is kept under the transition lock, with a fresh expiry', async () => {
    const dir = freshDir(root);
    let skewMs = 0;
    const clock = (): number => Date.now() + skewMs;
    const { holder, held, waiting, calls } = await queuedBehindHolder(dir, { ttlMs: 1_000, clock });
    skewMs = 5_000; // the waiter wakes (by its clock) long after the hand-off record's expiry
    await holder.release(held);
    const grant = await waiting;
    expect(calls.get('tryLockTransition')).toBeGreaterThanOrEqual(1);
    expect(calls.get('commit')).toBe(1); // the fresh expiry
    const record = readRecordFile(dir, 's');
    expect(record).toMatchObject({ owner: 'waiter', token: grant.token, expiryMs: grant.expiry.getTime() });
    expect(grant.expiry.getTime()).toBeGreaterThanOrEqual(Date.now() + skewMs);
  });

  test('a hand-off that could not remove the releaser’s .live removes it at the id’s next operation', async () => {
    const dir = freshDir(root);
    const { holder, held, waiter, waiting } = await queuedBehindHolder(dir);
    faults.fail('unlink', 'EACCES');
    await holder.release(held);
    const grant = await waiting;
    const live = leaseFiles(dir, 's').live(held.token);
    expect(fs.existsSync(live)).toBe(true);
    await holder.release(held); // a no-op for that grant, but the id's pending cleanup runs
    expect(fs.existsSync(live)).toBe(false);
    await waiter.release(grant);
  });
});

/**
 * A hand-off made by hand, as a release would make it but with the record's token written as
 * `tokenText`: the waiter's .wait renamed to the .live of `liveToken`, the record naming the waiter,
 * then the holder (another process, holding token 5's .live) lets go.
 */
async function handOffByHand(tokenText: string, liveToken: bigint) {
  const dir = freshDir('/dev/shm');
  const { files, ghost, waiter, waiting } = await queuedBehindGhost(dir);
  fs.renameSync(join(dir, waitFiles(dir)[0]!), files.live(liveToken));
  const handOff = formatRecord({ owner: 'waiter', token: 1n, expiryMs: Date.now() + 60_000, session: 's' });
  fs.writeFileSync(`${files.record}.tmp`, handOff.replace('"token":1,', `"token":${tokenText},`));
  fs.renameSync(`${files.record}.tmp`, files.record);
  await ghost.release();
  await ghost.end();
  // Settled by now or soon: a handler from the start, so that a rejection is never unhandled meanwhile.
  const outcome = waiting.then(
    (grant) => ({ grant, error: undefined }),
    (error: unknown) => ({ grant: undefined, error }),
  );
  return { outcome, waiter };
}

test('a hand-off with the largest token a record can hold is taken', async () => {
  const max = 2n ** 64n - 1n;
  const { outcome, waiter } = await handOffByHand(String(max), max);
  const { grant, error } = await outcome;
  expect(error).toBeUndefined();
  expect(grant!.token).toBe(max);
  await waiter.release(grant!);
});

test.each([
  ['a leading zero', '07', 7n],
  ['a token past 2^64-1', '18446744073709551616', 0n],
])(
  'a hand-off record with a token with %s is corrupt: the waiter says so and takes nothing',
  async (_what, text, live) => {
    const { outcome } = await handOffByHand(text, live);
    expect((await outcome).error).toMatchObject({ code: 'ELEASECORRUPT' });
  },
);

test('the watch’s fallback thread runs only when a CPU has nothing else to do (SCHED_IDLE)', async () => {
  const dir = freshDir('/dev/shm');
  const files = leaseFiles(dir, 's');
  fs.writeFileSync(files.record, formatRecord({ owner: 'ghost', token: 5n, expiryMs: Date.now() + 60_000 }));
  const ghost = await holdElsewhere(files.live(5n));
  const waiter = new Lease(dir);
  const waiting = waiter.acquire('s', 'waiter', { waitMs: 10_000 });
  await until(() => waitFiles(dir).length === 1, 'the waiter queued');
  // A close that leaves the .live held (as another process's probe does) starts the watch's thread.
  fs.closeSync(fs.openSync(files.live(5n), 'r'));
  // Field 41 of /proc/<pid>/task/<tid>/stat is the scheduling policy (SCHED_IDLE = 5).
  const policies = () =>
    fs.readdirSync(`/proc/${process.pid}/task`).map((tid) => {
      const stat = fs.readFileSync(`/proc/${process.pid}/task/${tid}/stat`, 'utf8');
      return [Number(tid), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[38])] as const;
    });
  await until(() => policies().some(([, policy]) => policy === 5), 'an idle-priority pool thread');
  expect(policies().find(([tid]) => tid === process.pid)?.[1]).toBe(0);
  await ghost.release();
  await ghost.end();
  await waiter.release(await waiting);
});

test('a waiter handed the lease leaves no timer behind: its process can end', async () => {
  const dir = freshDir('/dev/shm');
  const holder = new Lease(dir);
  const held = await holder.acquire('s', 'holder');
  // Waits up to a minute; once it has the lease it releases it and has nothing left to do.
  const script = `
    import { Lease } from ${JSON.stringify(new URL('../dist/index.js', import.meta.url).href)};
    const lease = new Lease(${JSON.stringify(dir)});
    const grant = await lease.acquire('s', 'child', { waitMs: 60_000 });
    await lease.release(grant);
    process.stdout.write('released\\n');`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = once(child, 'exit');
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  await until(() => waitFiles(dir).length === 1, 'the child queued');
  await holder.release(held);
  expect((await lines.next()).value).toBe('released');
  // Not the minute its wait's timer was set for.
  const ended = await Promise.race([exited, sleep(5_000).then(() => 'still running')]);
  child.kill('SIGKILL');
  expect(ended).toEqual([0, null]);
});
