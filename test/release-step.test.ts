// A release's hand-off in one step of the I/O layer (LeaseIO.releaseHandOff, native/flocklease.c):
// on tmpfs a contended release makes it without returning to JavaScript. It must write exactly what
// the JavaScript steps write, leave every other case to them before changing anything, and fail as
// they fail.
import fs from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, test } from 'vitest';
import { faults, fileIO, type HandOffStep, type LeaseIO } from '../src/flock/io.js';
import type { LeaseGrant } from '../src/port/types.js';
import { kIO, Lease } from '../src/flock/lease.js';
import { DirPaths, LIVE_SUFFIX, waitName, WAIT_SUFFIX } from '../src/flock/layout.js';
import { formatRecord, recordLayout } from '../src/flock/record.js';
import { formatQueue } from '../src/flock/queue.js';
import { diskRoot, freshDir } from './helpers/dirs.js';
import { leaseFiles, snapshot, waitFiles } from './helpers/lease-files.js';
import { until } from './helpers/until.js';

afterEach(() => faults.clear());

const onLinux = process.platform === 'linux';
const NOW = Date.UTC(2026, 11, 3, 12, 0, 0, 250);
const TOKEN = 1_796_000_000_000_000n;

/** The JavaScript steps alone: fileIO without the one-step hand-off. */
const stepByStep: LeaseIO = { ...fileIO, releaseHandOff: undefined };

/** fileIO counting what its one-step hand-off answered. */
function countingIO(outcomes: string[]): LeaseIO {
  return {
    ...fileIO,
    releaseHandOff(dir, step) {
      const outcome = fileIO.releaseHandOff!(dir, step);
      outcomes.push(outcome === undefined ? 'not taken' : typeof outcome === 'string' ? outcome : 'handed');
      return outcome;
    },
  };
}

/** A holder and two waiters queued behind it, every Lease on one frozen clock (so tokens, tickets
 * and expiries are the same in every run); the holder's I/O is `holderIO`. */
async function lineBehindHolder(dir: string, holderIO: LeaseIO) {
  const clock = (): number => NOW;
  const holder = new Lease(dir, { clock, [kIO]: holderIO } as object);
  const held = await holder.acquire('s', 'holder');
  const waiters: Lease[] = [];
  const waiting: Array<Promise<LeaseGrant>> = [];
  for (const [owner, ttlMs] of [
    ['first', 7_000],
    ['second', 9_000],
  ] as const) {
    const waiter = new Lease(dir, { clock, ttlMs, [kIO]: holderIO } as object);
    waiters.push(waiter);
    waiting.push(waiter.acquire('s', owner, { waitMs: 10_000 }));
    await until(() => waitFiles(dir).length === waiting.length, `${owner} queued`);
  }
  return { holder, held, waiters, waiting };
}

/** What `call` threw. */
function thrown(call: () => unknown): unknown {
  try {
    call();
  } catch (error) {
    return error;
  }
  throw new Error('it did not throw');
}

/** A tmpfs id whose record is `record` (ours by default) and whose queue is `queue`, its transition
 * lock held, and the step a release by the record's generation would give the I/O layer. */
function preparedTransition(dir: string, queue: string, record?: string) {
  fileIO.prepareDir(dir);
  const files = leaseFiles(dir, 's');
  fs.writeFileSync(
    files.record,
    record ?? formatRecord({ owner: 'holder', token: TOKEN, expiryMs: NOW, session: 's' }),
  );
  fs.writeFileSync(files.lock, queue); // every byte of it (writeLockData takes text without NULs)
  const lockFd = fileIO.tryLockTransition(files.lock);
  if (typeof lockFd !== 'number') throw new Error('the transition lock is busy');
  fs.writeFileSync(files.live(TOKEN), '');
  const step: HandOffStep = {
    lockFd,
    record: files.record,
    prefix: new DirPaths(dir).of(files.safe).prefix,
    liveSuffix: LIVE_SUFFIX,
    waitSuffix: WAIT_SUFFIX,
    ...recordLayout('holder', 's'),
    token: TOKEN,
    nowMs: NOW,
  };
  return { files, lockFd, step, wait: (ticket: number) => join(dir, waitName(files.safe, ticket)) };
}

const queueOf = (...waiters: Array<[number, string]>): string =>
  formatQueue({ waiters: waiters.map(([ticket, owner]) => ({ ticket, owner, ttlMs: 5_000 })), freeSince: 0 });

describe.runIf(onLinux)('on tmpfs', () => {
  test('a contended release hands over in one step, writing byte for byte what the JavaScript steps write', async () => {
    const results = [];
    for (const way of ['one step', 'step by step'] as const) {
      const dir = freshDir('/dev/shm');
      const outcomes: string[] = [];
      const io = way === 'one step' ? countingIO(outcomes) : stepByStep;
      const { holder, held, waiters, waiting } = await lineBehindHolder(dir, io);
      const before = snapshot(dir);
      await holder.release(held);
      const first = await waiting[0]!;
      const after = snapshot(dir);
      // The line goes on from there: the first waiter hands over to the second, the same way.
      await waiters[0]!.release(first);
      const second = await waiting[1]!;
      const last = snapshot(dir);
      await waiters[1]!.release(second);
      results.push({ before, after, last, first, second, outcomes, end: snapshot(dir) });
    }
    const [oneStep, stepwise] = results;
    // Handed twice in one step; the last release, to nobody, is the JavaScript steps' own.
    expect(oneStep!.outcomes).toEqual(['handed', 'handed', 'queue empty']);
    expect(stepwise!.outcomes).toEqual([]);
    for (const key of ['before', 'after', 'last', 'end', 'first', 'second'] as const) {
      expect(oneStep![key], key).toEqual(stepwise![key]);
    }
    expect(oneStep!.first).toMatchObject({ owner: 'first', expiry: new Date(NOW + 7_000) });
    // The record names the first waiter with its own TTL, the queue holds only the second.
    const record = Object.entries(oneStep!.after).find(([name]) => name.endsWith('.lease.json'))![1];
    expect(record).toBe(
      formatRecord({ owner: 'first', token: oneStep!.first.token, expiryMs: NOW + 7_000, session: 's' }),
    );
    const queue = Object.entries(oneStep!.after).find(([name]) => name.endsWith('.lock'))![1];
    expect(queue).toMatch(/^\{"waiters":\[\{"t":\d+,"o":"second","ttl":9000\}\],"freeSince":0\}$/);
  });

  test('every other case is left to the JavaScript steps before anything changes', () => {
    const dir = freshDir('/dev/shm');
    const cases: Record<string, { queue: string; record?: string; alive?: number[] }> = {
      'a dead front waiter': { queue: queueOf([11, 'a'], [12, 'b']), alive: [12] },
      'a front owner with an escape': { queue: queueOf([11, 'a"b']), alive: [11] },
      'a queue in another layout': { queue: '{"waiters": [{"t":11,"o":"a","ttl":5000}],"freeSince":0}', alive: [11] },
      'a later entry that is not valid': {
        queue: '{"waiters":[{"t":11,"o":"a","ttl":5000},{"t":12,"o":"","ttl":5000}],"freeSince":0}',
        alive: [11],
      },
      'a successor’s record': {
        queue: queueOf([11, 'a']),
        record: formatRecord({ owner: 'holder', token: TOKEN + 1n, expiryMs: NOW, session: 's' }),
        alive: [11],
      },
      'a record in another layout': {
        queue: queueOf([11, 'a']),
        record: `{"owner":"holder", "token":${TOKEN},"expiry":"2026-12-03T12:00:00.250Z","session":"s"}`,
        alive: [11],
      },
      'a record of ours that is corrupt': {
        queue: queueOf([11, 'a']),
        record: `{"owner":"holder","token":${TOKEN},"expiry":"2026-13-03T12:00:00.250Z","session":"s"}`,
        alive: [11],
      },
      'a record of ours with an expiry in nanoseconds': {
        queue: queueOf([11, 'a']),
        record: `{"owner":"holder","token":${TOKEN},"expiry":"2026-12-03T12:00:00.250000001Z","session":"s"}`,
        alive: [11],
      },
      'a record of ours with more after it': {
        queue: queueOf([11, 'a']),
        record: `${formatRecord({ owner: 'holder', token: TOKEN, expiryMs: NOW, session: 's' })}\n`,
        alive: [11],
      },
      'a queue with a NUL after its end': { queue: `${queueOf([11, 'a'])}\u0000x`, alive: [11] },
      'no record': { queue: queueOf([11, 'a']), record: '', alive: [11] },
    };
    for (const [name, setup] of Object.entries(cases)) {
      const sub = join(dir, name.replace(/\W+/g, '-'));
      fs.mkdirSync(sub);
      const t = preparedTransition(sub, setup.queue, setup.record);
      if (setup.record === '') fs.rmSync(t.files.record);
      const held = (setup.alive ?? []).map((ticket) => fileIO.lockFile(t.wait(ticket))!);
      for (const ticket of [11, 12]) if (!fs.existsSync(t.wait(ticket))) fs.writeFileSync(t.wait(ticket), '');
      const before = snapshot(sub);
      expect(fileIO.releaseHandOff!(sub, t.step), name).toBeUndefined();
      expect(snapshot(sub), name).toEqual(before);
      fileIO.unlockTransition(t.lockFd);
      for (const fd of held) fileIO.closeFile(fd);
    }
  });

  test('a release to nobody reads the queue once, in the one step, and then takes the JavaScript steps', async () => {
    const dir = freshDir('/dev/shm');
    const t = preparedTransition(dir, '');
    const before = snapshot(dir);
    expect(fileIO.releaseHandOff!(dir, t.step)).toBe('queue empty');
    expect(snapshot(dir)).toEqual(before);
    fileIO.unlockTransition(t.lockFd);
    // Through the Lease: each call made once, as the C floor makes them (bench/syscalls.mjs).
    const calls = new Map<string, number>();
    const counted = Object.fromEntries(
      Object.entries(countingIO([])).map(([name, call]) => [
        name,
        (...args: unknown[]) => {
          calls.set(name, (calls.get(name) ?? 0) + 1);
          return (call as (...a: unknown[]) => unknown)(...args);
        },
      ]),
    ) as unknown as LeaseIO;
    const lease = new Lease(freshDir('/dev/shm'), { [kIO]: counted } as object);
    const grant = await lease.acquire('s', 'me');
    calls.clear();
    await lease.release(grant);
    expect(Object.fromEntries(calls)).toEqual({
      tryLockTransition: 1,
      releaseHandOff: 1,
      readRecord: 1,
      commit: 1,
      unlockTransition: 1,
      closeFile: 1,
    });
  });

  test('the front waiter’s .wait gone at the rename: nothing changed, and the step can be made again', () => {
    const dir = freshDir('/dev/shm');
    const t = preparedTransition(dir, queueOf([11, 'a'], [12, 'b']));
    const held = [fileIO.lockFile(t.wait(11))!, fileIO.lockFile(t.wait(12))!];
    const before = snapshot(dir);
    faults.fail('adopt.rename', 'ENOENT');
    expect(fileIO.releaseHandOff!(dir, t.step)).toBe('front gone');
    expect(snapshot(dir)).toEqual(before);
    const outcome = fileIO.releaseHandOff!(dir, t.step);
    expect(outcome).toEqual({ next: BigInt(NOW * 1000), removalErrors: [] });
    expect(fs.readFileSync(t.files.record, 'utf8')).toBe(
      formatRecord({ owner: 'a', token: BigInt(NOW * 1000), expiryMs: NOW + 5_000, session: 's' }),
    );
    expect(fs.readFileSync(t.files.lock, 'utf8')).toBe(queueOf([12, 'b']));
    expect(fs.existsSync(t.files.live(TOKEN))).toBe(false);
    expect(fs.existsSync(t.wait(11))).toBe(false);
    expect(fileIO.sameFile(held[0]!, t.files.live(BigInt(NOW * 1000)))).toBe(true);
    fileIO.unlockTransition(t.lockFd);
    for (const fd of held) fileIO.closeFile(fd);
  });

  test('a release whose front waiter gave up at the rename hands the lease to the next one, as before', async () => {
    const dir = freshDir('/dev/shm');
    const outcomes: string[] = [];
    const { holder, held, waiters, waiting } = await lineBehindHolder(dir, countingIO(outcomes));
    faults.fail('adopt.rename', 'ENOENT'); // as if the first waiter had just removed its .wait
    await holder.release(held);
    expect(outcomes).toEqual(['front gone']);
    const second = await waiting[1]!;
    expect(second.owner).toBe('second');
    // The first waiter, in fact still waiting, is back in line behind it.
    await waiters[1]!.release(second);
    await waiters[0]!.release(await waiting[0]!);
    expect(outcomes).toEqual(['front gone', 'handed', 'queue empty']);
  });

  test('the token and the expiry are made as the JavaScript steps make them', () => {
    const dir = freshDir('/dev/shm');
    // A token ahead of the clock's microseconds goes up by one; the last waiter empties the queue.
    const t = preparedTransition(dir, queueOf([11, 'a']));
    const step = { ...t.step, nowMs: NOW + 0.9 };
    fs.writeFileSync(t.files.record, formatRecord({ owner: 'holder', token: TOKEN * 2n, expiryMs: NOW, session: 's' }));
    const held = fileIO.lockFile(t.wait(11))!;
    fs.writeFileSync(t.files.live(TOKEN * 2n), '');
    expect(fileIO.releaseHandOff!(dir, { ...step, token: TOKEN * 2n })).toEqual({
      next: TOKEN * 2n + 1n,
      removalErrors: [],
    });
    expect(fs.readFileSync(t.files.record, 'utf8')).toBe(
      formatRecord({ owner: 'a', token: TOKEN * 2n + 1n, expiryMs: NOW + 5_000, session: 's' }),
    );
    expect(fs.readFileSync(t.files.lock, 'utf8')).toBe('');
    fileIO.unlockTransition(t.lockFd);
    fileIO.closeFile(held);
  });

  test('a failed commit undoes the hand-off and throws as the commit does; a failure after it is reported', () => {
    const dir = freshDir('/dev/shm');
    const t = preparedTransition(dir, queueOf([11, 'a'], [12, 'b']));
    const held = [fileIO.lockFile(t.wait(11))!, fileIO.lockFile(t.wait(12))!];
    const before = snapshot(dir);
    faults.fail('temp.write', 'EIO');
    expect(thrown(() => fileIO.releaseHandOff!(dir, t.step))).toMatchObject({ code: 'EIO', committed: false });
    expect(snapshot(dir)).toEqual(before); // the .wait renamed back, no temp file left
    faults.fail('dir.fsync', 'EIO');
    expect(thrown(() => fileIO.releaseHandOff!(dir, t.step))).toMatchObject({ code: 'EIO', committed: true });
    expect(fs.readFileSync(t.files.record, 'utf8')).toContain('"owner":"a"');
    fileIO.unlockTransition(t.lockFd);
    for (const fd of held) fileIO.closeFile(fd);
  });

  test('our .live that will not go is reported for the Lease to retry; a queue that cannot be written throws', () => {
    const dir = freshDir('/dev/shm');
    const t = preparedTransition(dir, queueOf([11, 'a'], [12, 'b']));
    const held = [fileIO.lockFile(t.wait(11))!, fileIO.lockFile(t.wait(12))!];
    faults.fail('unlink', 'EACCES');
    const outcome = fileIO.releaseHandOff!(dir, t.step);
    expect(outcome).toMatchObject({
      next: BigInt(NOW * 1000),
      removalErrors: [{ code: 'EACCES', path: t.files.live(TOKEN) }],
    });
    expect(fs.existsSync(t.files.live(TOKEN))).toBe(true);
    // The next hand-off (now the first waiter's, to the second), its queue write failing.
    const next = { ...t.step, ...recordLayout('a', 's'), token: BigInt(NOW * 1000) };
    faults.fail('queue.truncate', 'EIO'); // the last waiter leaves an empty queue: only a truncate
    expect(thrown(() => fileIO.releaseHandOff!(dir, next))).toMatchObject({ code: 'EIO', syscall: 'ftruncate' });
    expect(fs.readFileSync(t.files.record, 'utf8')).toContain('"owner":"b"');
    fileIO.unlockTransition(t.lockFd);
    for (const fd of held) fileIO.closeFile(fd);
  });

  test('a release whose one step left our .live behind removes it at the id’s next operation', async () => {
    const dir = freshDir('/dev/shm');
    const outcomes: string[] = [];
    const { holder, held, waiters, waiting } = await lineBehindHolder(dir, countingIO(outcomes));
    faults.fail('unlink', 'EACCES');
    await holder.release(held);
    expect(outcomes).toEqual(['handed']);
    const live = leaseFiles(dir, 's').live(held.token);
    expect(fs.existsSync(live)).toBe(true);
    await holder.release(held); // a no-op for that grant, but the id's pending cleanup runs
    expect(fs.existsSync(live)).toBe(false);
    await waiters[0]!.release(await waiting[0]!);
    await waiters[1]!.release(await waiting[1]!);
  });
});

test('off tmpfs the one step is never taken: a commit there fsyncs, which never runs on the event loop', () => {
  const dir = freshDir(diskRoot());
  const t = preparedTransition(dir, queueOf([11, 'a']));
  const held = fileIO.lockFile(t.wait(11))!;
  const before = snapshot(dir);
  expect(fileIO.releaseHandOff!(dir, t.step)).toBeUndefined();
  expect(snapshot(dir)).toEqual(before);
  fileIO.unlockTransition(t.lockFd);
  fileIO.closeFile(held);
});
