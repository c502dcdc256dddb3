// The waiting acquire and the self-renewing hold, between real processes: woken by a release or
// a crash (no polling), takeover at an alive holder's expiry, FIFO hand-off, timeouts and aborts
// that leave no trace, a stopped or dead waiter never blocking the queue, and holds that renew,
// reclaim after a suspension, and abort their signal on a real loss.
import diagnostics from 'node:diagnostics_channel';
import fs from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, test } from 'vitest';
import { faults, fileIO, type LeaseIO } from '../src/flock/io.js';
import { kIO, Lease } from '../src/flock/lease.js';
import { MemoryLease } from '../src/memory/memory-lease.js';
import { LeaseExpiredError, LeaseHeldError } from '../src/port/errors.js';
import type { LeaseGrant } from '../src/port/types.js';
import { LeaseAgent, type AgentGrant } from './helpers/agent.js';
import { freshDir } from './helpers/dirs.js';
import { isFlocked, leaseFiles, readRecordFile, waitFiles } from './helpers/lease-files.js';
import { until } from './helpers/until.js';

afterEach(() => faults.clear());

const now = (): number => performance.timeOrigin + performance.now();
const queueText = (dir: string, id: string): string => fs.readFileSync(leaseFiles(dir, id).lock, 'utf8');

/** Queued, and out of its transition: a SIGSTOP inside one would hold the lock others need. */
const queuedAndIdle = (dir: string, id: string) => async (): Promise<boolean> =>
  waitFiles(dir).length === 1 && !(await isFlocked(leaseFiles(dir, id).lock));

/** Runs `body` while s1's holder (another process) holds it and its queued front waiter (another
 * process, with `waiterTtlMs`) is stopped; the waiter is continued after. */
async function behindStoppedWaiter(
  dir: string,
  waiterTtlMs: number,
  body: (holder: LeaseAgent) => Promise<void>,
): Promise<void> {
  // A long lease: it must not expire (and go to the waiter by expiry) before the waiter queues,
  // however long starting the waiter's process takes on a loaded machine.
  const holder = await LeaseAgent.start(dir, 30_000);
  await holder.acquire('s1', 'holder');
  const stopped = await LeaseAgent.start(dir, waiterTtlMs);
  void stopped.call({ op: 'acquire', id: 's1', owner: 'stopped', waitMs: 20_000 }).catch(() => {});
  await until(queuedAndIdle(dir, 's1'), 'the waiter to queue');
  stopped.kill('SIGSTOP');
  try {
    await body(holder);
  } finally {
    stopped.kill('SIGCONT');
  }
}

/** behindStoppedWaiter, its holder crashed: the lease is free but reserved for a waiter that does
 * not come (nobody hands it over). */
const afterCrashBehindStoppedWaiter = (dir: string, body: () => Promise<void>): Promise<void> =>
  behindStoppedWaiter(dir, 300, async (holder) => {
    holder.kill('SIGKILL');
    await holder.exited;
    await body();
  });

describe('waiting acquire', () => {
  /** A Lease whose watches are recorded: the paths whose watch reported a let-go, in order. The
   * holder's lease and the wait are 10 minutes, so the only timer of the wait (its alarm) is 10
   * minutes away: a grant within the test's timeout came from a watch. */
  const WAIT_MS = 600_000;
  function watchedLease(dir: string): { lease: Lease; reported: string[] } {
    const reported: string[] = [];
    const io: LeaseIO = {
      ...fileIO,
      watchUnlock: (path, onUnlocked, mode) =>
        fileIO.watchUnlock(path, (errno) => (reported.push(path), onUnlocked(errno)), mode),
    };
    return { lease: new Lease(dir, { [kIO]: io } as object), reported };
  }

  test("is woken by its watch of the holder's .live on a release by another process (no timer, no polling)", async () => {
    const dir = freshDir('/dev/shm');
    const holder = await LeaseAgent.start(dir, WAIT_MS);
    const held = await holder.acquire('s1', 'alice');
    const { lease, reported } = watchedLease(dir);
    const waiting = lease.acquire('s1', 'bob', { waitMs: WAIT_MS });
    await until(() => waitFiles(dir).length === 1, 'bob to queue');
    expect(reported).toEqual([]);
    const released = await holder.call({ op: 'release' });
    expect(released.ok).toBe(true);
    const grant = await waiting;
    expect(reported).toEqual([leaseFiles(dir, 's1').live(BigInt(held.token))]);
    expect(grant.token).toBeGreaterThan(BigInt(held.token));
    expect(waitFiles(dir)).toEqual([]);
  });

  test('detects a crashed holder by its watch, without polling while it waits', async () => {
    const dir = freshDir();
    const holder = await LeaseAgent.start(dir, WAIT_MS);
    const held = await holder.acquire('s1', 'alice');
    const { lease, reported } = watchedLease(dir);
    const cpuBefore = process.cpuUsage();
    const waiting = lease.acquire('s1', 'bob', { waitMs: WAIT_MS });
    await sleep(500);
    const cpu = process.cpuUsage(cpuBefore);
    expect((cpu.user + cpu.system) / 1000).toBeLessThan(100); // half a second of waiting costs ~nothing
    expect(reported).toEqual([]);
    holder.kill('SIGKILL');
    await waiting;
    expect(reported).toEqual([leaseFiles(dir, 's1').live(BigInt(held.token))]);
  });

  test('takes over a holder that is alive but stopped at its expiry, not before', async () => {
    const dir = freshDir();
    const holder = await LeaseAgent.start(dir, 400);
    const held = await holder.acquire('s1', 'alice');
    holder.kill('SIGSTOP');
    try {
      const grant = await new Lease(dir, { ttlMs: 400 }).acquire('s1', 'bob', { waitMs: 10_000 });
      const at = Date.now();
      expect(at).toBeGreaterThanOrEqual(held.expiry);
      expect(at - held.expiry).toBeLessThan(1_000);
      expect(grant.token).toBeGreaterThan(BigInt(held.token));
    } finally {
      holder.kill('SIGCONT');
    }
  });

  test('runs out after waitMs with LeaseHeldError naming the holder, and leaves no trace', async () => {
    const dir = freshDir();
    const holder = await LeaseAgent.start(dir, 30_000);
    await holder.acquire('s1', 'alice');
    const started = Date.now();
    const error = await new Lease(dir).acquire('s1', 'bob', { waitMs: 200 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LeaseHeldError);
    expect(error).toMatchObject({ holder: { owner: 'alice' } });
    expect(Date.now() - started).toBeGreaterThanOrEqual(195);
    expect(waitFiles(dir)).toEqual([]);
  });

  test('an abort rejects with the reason and gives up its place in line', async () => {
    const dir = freshDir();
    const holder = await LeaseAgent.start(dir, 30_000);
    await holder.acquire('s1', 'alice');
    const controller = new AbortController();
    const waiting = new Lease(dir).acquire('s1', 'bob', { waitMs: 10_000, signal: controller.signal });
    await until(() => waitFiles(dir).length === 1, 'bob to queue');
    controller.abort(new Error('no longer needed'));
    await expect(waiting).rejects.toThrow('no longer needed');
    expect(waitFiles(dir)).toEqual([]);
    // the stale queue entry is dropped by the next one who meets it
    await holder.call({ op: 'release' });
    expect((await new Lease(dir).acquire('s1', 'carol')).owner).toBe('carol');
    expect(queueText(dir, 's1')).toBe('');
  });

  test('waiters get the lease in arrival order, handed over on each release', async () => {
    const dir = freshDir('/dev/shm');
    const holder = await LeaseAgent.start(dir, 30_000);
    const first = await holder.acquire('s1', 'holder');
    const waiters: LeaseAgent[] = [];
    const pending: Array<Promise<{ index: number; token: bigint }>> = [];
    for (let index = 0; index < 4; index++) {
      const agent = await LeaseAgent.start(dir, 30_000);
      waiters.push(agent);
      pending.push(agent.acquire('s1', `waiter-${index}`, 20_000).then((g) => ({ index, token: BigInt(g.token) })));
      await until(() => waitFiles(dir).length === index + 1, `waiter ${index} to queue`);
    }
    const order: number[] = [];
    let previous = BigInt(first.token);
    await holder.call({ op: 'release' });
    for (let turn = 0; turn < 4; turn++) {
      const next = await Promise.race(pending.filter((_, i) => !order.includes(i)));
      order.push(next.index);
      expect(next.token).toBeGreaterThan(previous);
      previous = next.token;
      expect(readRecordFile(dir, 's1').owner).toBe(`waiter-${next.index}`);
      await waiters[next.index]!.call({ op: 'release' });
    }
    expect(order).toEqual([0, 1, 2, 3]);
    expect(waitFiles(dir)).toEqual([]);
  });

  test('a dead waiter is skipped, not waited for', async () => {
    const dir = freshDir();
    const holder = await LeaseAgent.start(dir, 30_000);
    await holder.acquire('s1', 'holder');
    const doomed = await LeaseAgent.start(dir, 30_000);
    void doomed.call({ op: 'acquire', id: 's1', owner: 'doomed', waitMs: 20_000 }).catch(() => {});
    await until(() => waitFiles(dir).length === 1, 'the first waiter to queue');
    const survivor = new Lease(dir).acquire('s1', 'survivor', { waitMs: 20_000 });
    await until(() => waitFiles(dir).length === 2, 'the second waiter to queue');
    doomed.kill('SIGKILL');
    await doomed.exited;
    await holder.call({ op: 'release' });
    expect((await survivor).owner).toBe('survivor');
  });

  test('a free lease waits for a stopped front waiter only for a grace, then the next may take it', async () => {
    const dir = freshDir();
    await afterCrashBehindStoppedWaiter(dir, async () => {
      const lease = new Lease(dir, { ttlMs: 300 });
      const refused = await lease.acquire('s1', 'eager').catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(LeaseHeldError);
      expect((refused as Error).message).toContain('reserved for a queued waiter');
      expect(refused).toMatchObject({ holder: { owner: 'holder' } }); // the record's (crashed) holder
      const started = Date.now();
      const grant = await lease.acquire('s1', 'eager', { waitMs: 5_000 });
      expect(grant.owner).toBe('eager');
      expect(Date.now() - started).toBeLessThan(2_000); // the grace is min(ttl, 1 s)
    });
  });

  test('a waiter that finds others in line queues behind them without probing the holder or reading the record', async () => {
    const dir = freshDir();
    const holder = await LeaseAgent.start(dir, 30_000);
    await holder.acquire('s1', 'holder');
    const firstLease = new Lease(dir);
    const first = firstLease.acquire('s1', 'first', { waitMs: 20_000 });
    await until(() => waitFiles(dir).length === 1, 'the first waiter to queue');
    // The probe's close would wake the first waiter, whose watch is on the holder's .live; the
    // record, whatever it says, would not change where the second waiter goes.
    let probes = 0;
    let reads = 0;
    const io: LeaseIO = {
      ...fileIO,
      probeLive: (path) => (probes++, fileIO.probeLive(path)),
      readRecord: (path) => (reads++, fileIO.readRecord(path)),
    };
    const secondLease = new Lease(dir, { [kIO]: io } as object);
    const second = secondLease.acquire('s1', 'second', { waitMs: 20_000 });
    await until(() => waitFiles(dir).length === 2, 'the second waiter to queue');
    expect(probes).toBe(0);
    expect(reads).toBe(0);
    await holder.call({ op: 'release' });
    await firstLease.release(await first);
    expect((await second).owner).toBe('second');
  });

  /** A waiting acquire by `owner` that gives up right after its first try (its first look at the
   * queue takes 5 ms, its wait 1 ms), so with the refusal that try made: it must name `held`'s
   * holder, and leave the line to the one waiter already in it. Its message. */
  const refusedAfterFirstTry = async (dir: string, owner: string, held: AgentGrant): Promise<string> => {
    const io: LeaseIO = {
      ...fileIO,
      readLockData: (fd) => {
        for (const until = performance.now() + 5; performance.now() < until;);
        return fileIO.readLockData(fd);
      },
    };
    const refused = await new Lease(dir, { [kIO]: io } as object)
      .acquire('s1', owner, { waitMs: 1 })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(LeaseHeldError);
    expect(refused).toMatchObject({ holder: { owner: 'holder', token: BigInt(held.token) } });
    expect(waitFiles(dir)).toHaveLength(1);
    return (refused as Error).message;
  };

  test('a waiter that gives up behind others is refused naming the holder, and leaves the line', async () => {
    const dir = freshDir();
    const holder = await LeaseAgent.start(dir, 30_000);
    const held = await holder.acquire('s1', 'holder');
    const firstLease = new Lease(dir);
    const first = firstLease.acquire('s1', 'first', { waitMs: 20_000 });
    await until(() => waitFiles(dir).length === 1, 'the first waiter to queue');
    // Its first try queues it without reading the record: the refusal reads it to name the holder.
    expect(await refusedAfterFirstTry(dir, 'second', held)).toContain('is held: holder holds it');
    await holder.call({ op: 'release' });
    expect((await first).owner).toBe('first');
  });

  test('a waiter that gives up behind others for an expired lease is refused as reserved for them', async () => {
    const dir = freshDir();
    // Both processes first, then a short lease: the waiter queues long before it expires.
    const holder = await LeaseAgent.start(dir, 2_000);
    const stopped = await LeaseAgent.start(dir, 30_000);
    const held = await holder.acquire('s1', 'holder');
    void stopped.call({ op: 'acquire', id: 's1', owner: 'stopped', waitMs: 20_000 }).catch(() => {});
    await until(queuedAndIdle(dir, 's1'), 'the waiter to queue');
    stopped.kill('SIGSTOP');
    try {
      // Expired, and its front waiter (stopped) does not come for it.
      await sleep(Math.max(0, held.expiry - now()) + 50);
      expect(await refusedAfterFirstTry(dir, 'late', held)).toContain('reserved for the waiters queued ahead');
    } finally {
      stopped.kill('SIGCONT');
    }
  });

  test('a waiter queued behind a stopped front waiter of a crashed holder gets the lease after the grace', async () => {
    const dir = freshDir();
    await afterCrashBehindStoppedWaiter(dir, async () => {
      // Its first try queues without asking whether the holder lives; the line it joined finds out.
      const started = Date.now();
      const grant = await new Lease(dir, { ttlMs: 300 }).acquire('s1', 'late', { waitMs: 5_000 });
      expect(grant.owner).toBe('late');
      expect(Date.now() - started).toBeLessThan(3_000); // two graces of min(ttl, 1 s) at most
      expect(readRecordFile(dir, 's1')).toMatchObject({ owner: 'late', token: grant.token });
    });
  });

  test('a release hands the lease to a stopped waiter, which then holds it until its expiry', async () => {
    const dir = freshDir();
    await behindStoppedWaiter(dir, 400, async (holder) => {
      await holder.call({ op: 'release' });
      const record = readRecordFile(dir, 's1');
      expect(record.owner).toBe('stopped'); // handed over while asleep: its flock guards it
      await expect(new Lease(dir).acquire('s1', 'eager')).rejects.toBeInstanceOf(LeaseHeldError);
      const grant = await new Lease(dir).acquire('s1', 'eager', { waitMs: 5_000 });
      expect(Date.now()).toBeGreaterThanOrEqual(record.expiryMs);
      expect(grant.token).toBeGreaterThan(record.token);
    });
  });

  test('a release whose front waiter just gave up hands the lease to the next one instead of failing', async () => {
    const dir = freshDir();
    const holder = new Lease(dir);
    const held = await holder.acquire('s1', 'holder');
    const first = new Lease(dir).acquire('s1', 'first', { waitMs: 10_000 });
    await until(() => waitFiles(dir).length === 1, 'the first waiter to queue');
    const secondLease = new Lease(dir);
    const second = secondLease.acquire('s1', 'second', { waitMs: 10_000 });
    await until(() => waitFiles(dir).length === 2, 'the second waiter to queue');
    // As if the first waiter removed its .wait file between the releaser's probe and its rename.
    faults.fail('adopt.rename', 'ENOENT');
    await holder.release(held); // resolves: no ENOENT escapes
    expect(readRecordFile(dir, 's1').owner).toBe('second');
    await secondLease.release(await second);
    expect((await first).owner).toBe('first'); // it rejoined the line and got the next turn
  });

  test('waiters of one process queue in order too, behind a holder of the same process', async () => {
    const dir = freshDir();
    const lease = new Lease(dir);
    const held = await lease.acquire('s1', 'holder');
    const order: string[] = [];
    const waiters = ['w1', 'w2', 'w3'].map((owner) =>
      lease.acquire('s1', owner, { waitMs: 10_000 }).then((g) => (order.push(owner), g)),
    );
    await until(() => waitFiles(dir).length === 3, 'three waiters');
    await lease.release(held);
    for (let i = 0; i < 3; i++) {
      await until(() => order.length === i + 1, `waiter ${i + 1}`);
      await lease.release(await waiters[i]!);
    }
    expect(order).toEqual(['w1', 'w2', 'w3']);
  });

  // A release wakes one waiter, not the line: each one watches the .wait file of the one just ahead
  // (the front one, the holder's .live). Joined as text (the queue in the layout formatQueue
  // writes), and through the general reader (a queue in any other layout, here with a leading space).
  test.each([['own layout'], ['any other layout']])(
    'each queued waiter watches the waiter just ahead of it, the first one the holder (%s)',
    async (layout) => {
      const dir = freshDir();
      const holder = new Lease(dir);
      const held = await holder.acquire('s1', 'holder');
      const files = leaseFiles(dir, 's1');
      let front = files.live(held.token);
      let ghost: number | undefined;
      if (layout === 'any other layout') {
        // A live waiter already in line, in a text only the general reader takes.
        const ghostWait = join(dir, `${files.safe}.1.wait`);
        ghost = fileIO.lockFile(ghostWait);
        fs.writeFileSync(files.lock, ' {"waiters":[{"t":1,"o":"ghost","ttl":30000}],"freeSince":0}');
        front = ghostWait;
      }
      const controller = new AbortController();
      const waiting: Promise<unknown>[] = [];
      try {
        for (const owner of ['w1', 'w2', 'w3']) {
          const watched: string[] = [];
          const io: LeaseIO = {
            ...fileIO,
            watchUnlock: (path, report, mode) => (watched.push(path), fileIO.watchUnlock(path, report, mode)),
          };
          const before = new Set(waitFiles(dir));
          const lease = new Lease(dir, { [kIO]: io } as object);
          waiting.push(
            lease.acquire('s1', owner, { waitMs: 20_000, signal: controller.signal }).catch((e: unknown) => e),
          );
          await until(() => watched.length === 1, `${owner} to wait`);
          expect([owner, watched]).toEqual([owner, [front]]);
          const own = waitFiles(dir).filter((name) => !before.has(name));
          expect(own).toHaveLength(1);
          front = join(dir, own[0]!);
        }
        expect(queueText(dir, 's1')).toMatch(/^\{"waiters":\[\{"t":/); // written back in formatQueue's layout
      } finally {
        controller.abort();
        await Promise.all(waiting);
        if (ghost !== undefined) fileIO.closeFile(ghost);
        await holder.release(held);
      }
    },
  );

  test('a hand-off that wakes a waiter while another operation of its process on the id is under way waits its turn', async () => {
    const dir = freshDir();
    const holder = new Lease(dir); // its own open files: another process, as far as flock can tell
    const held = await holder.acquire('s1', 'holder');
    const lockPath = leaseFiles(dir, 's1').lock;
    const order: string[] = [];
    let blocker: number | string | undefined;
    let other: Promise<unknown> | undefined;
    let armed = true;
    const lease: Lease = new Lease(dir, {
      [kIO]: {
        ...fileIO,
        watchUnlock: ((path, report, mode) =>
          fileIO.watchUnlock(
            path,
            (errno) => {
              if (armed) {
                // The release has just handed the lease over. Before the waiter runs, this process
                // starts another operation on the id, held up by someone else's transition lock.
                armed = false;
                blocker = fileIO.tryLockTransition(lockPath);
                other = lease.acquire('s1', 'other').finally(() => order.push('other'));
              }
              return report(errno);
            },
            mode,
          )) satisfies LeaseIO['watchUnlock'],
      },
    } as object);
    const waiting = lease.acquire('s1', 'waiter', { waitMs: 30_000 }).finally(() => order.push('waiter'));
    await until(() => waitFiles(dir).length === 1, 'the waiter queued');
    await holder.release(held);
    // The report may come from the watch's pool thread, which runs at idle priority
    // (native/src/watch.c): on two busy cores it can wait seconds for a CPU. Bounded well inside
    // the waiter's own wait.
    await until(() => other !== undefined, 'the hand-off seen', 20_000);
    expect(blocker).toBeTypeOf('number');
    await sleep(100);
    expect(order).toEqual([]); // the waiter does not go past the operation ahead of it
    fileIO.unlockTransition(blocker as number);
    await expect(other).rejects.toMatchObject({ code: 'ELEASEHELD', holder: { owner: 'waiter' } });
    const grant = await waiting;
    expect(order).toEqual(['other', 'waiter']);
    expect(readRecordFile(dir, 's1')).toMatchObject({ owner: 'waiter', token: grant.token });
    await lease.release(grant);
    expect(waitFiles(dir)).toEqual([]);
  });

  test('MemoryLease waits the same way: in order, woken by release, bounded by waitMs', async () => {
    const lease = new MemoryLease({ ttlMs: 30_000 });
    const held = await lease.acquire('s1', 'holder');
    const order: string[] = [];
    const a = lease.acquire('s1', 'a', { waitMs: 5_000 }).then((g) => (order.push('a'), g));
    const b = lease.acquire('s1', 'b', { waitMs: 5_000 }).then((g) => (order.push('b'), g));
    await expect(lease.acquire('s1', 'c', { waitMs: 50 })).rejects.toBeInstanceOf(LeaseHeldError);
    await lease.release(held);
    await lease.release(await a);
    await b;
    expect(order).toEqual(['a', 'b']);
  });

  test('waitMs: Infinity waits without spinning, even while the transition lock is busy', async () => {
    const dir = freshDir();
    const { flockSync } = (await import('fs-ext')).default;
    fs.mkdirSync(dir, { recursive: true });
    const fd = fs.openSync(leaseFiles(dir, 's1').lock, 'a');
    flockSync(fd, 'ex'); // as if another process were stopped mid-operation
    const warnings: Error[] = [];
    const onWarning = (warning: Error): void => void warnings.push(warning);
    process.on('warning', onWarning);
    const controller = new AbortController();
    try {
      const cpuBefore = process.cpuUsage();
      const waiting = new Lease(dir).acquire('s1', 'alice', { waitMs: Infinity, signal: controller.signal });
      await sleep(300);
      const cpu = process.cpuUsage(cpuBefore);
      expect((cpu.user + cpu.system) / 1000).toBeLessThan(100); // not a 1 ms timer loop
      fs.closeSync(fd);
      expect((await waiting).owner).toBe('alice');
      expect(warnings.map((w) => w.name)).not.toContain('TimeoutOverflowWarning');
    } finally {
      process.off('warning', onWarning);
      controller.abort();
    }
  });

  test('bad waitMs values are refused before anything happens', async () => {
    const lease = new Lease(freshDir());
    await expect(lease.acquire('s1', 'a', { waitMs: -1 })).rejects.toBeInstanceOf(RangeError);
    await expect(lease.acquire('s1', 'a', { waitMs: Number.NaN })).rejects.toBeInstanceOf(RangeError);
    await expect(lease.acquire('s1', 'a', { waitMs: '1s' as unknown as number })).rejects.toBeInstanceOf(TypeError);
  });
});

describe('hold', () => {
  test('renews about every TTL/3 and releases at the end of an `await using` scope', async () => {
    const dir = freshDir();
    const lease = new Lease(dir, { ttlMs: 300 });
    const renewed: LeaseGrant[] = [];
    const onRenew = ({ grant }: { grant: LeaseGrant }): void => void renewed.push(grant);
    diagnostics.subscribe('flocklease:renew', onRenew as (message: unknown) => void);
    let token: bigint;
    try {
      await using hold = await lease.hold('s1', 'alice');
      token = hold.grant.token;
      await sleep(750);
      expect(renewed.length).toBeGreaterThanOrEqual(2);
      expect(renewed.length).toBeLessThanOrEqual(8);
      expect(renewed.every((g) => g.token === token)).toBe(true);
      expect(hold.grant.expiry.getTime()).toBeGreaterThan(Date.now());
      expect(hold.signal.aborted).toBe(false);
    } finally {
      diagnostics.unsubscribe('flocklease:renew', onRenew as (message: unknown) => void);
    }
    expect(readRecordFile(dir, 's1')).toMatchObject({ owner: '', token: token! });
  });

  test('reclaims the lease after a SIGSTOP past its TTL when nobody took it', async () => {
    const dir = freshDir();
    const agent = await LeaseAgent.start(dir, 300);
    const { grant } = await agent.call({ op: 'hold', id: 's1', owner: 'alice' });
    agent.kill('SIGSTOP');
    await sleep(700);
    agent.kill('SIGCONT');
    const reclaim = await agent.event('reclaim');
    expect(reclaim.grant!.token).toBe(grant!.token);
    expect(agent.events.some((e) => e.event === 'lost')).toBe(false);
    await expect(new Lease(dir).acquire('s1', 'bob')).rejects.toBeInstanceOf(LeaseHeldError);
  });

  test('aborts its signal with LeaseHeldError on a real loss', async () => {
    const dir = freshDir();
    const agent = await LeaseAgent.start(dir, 300);
    await agent.call({ op: 'hold', id: 's1', owner: 'alice' });
    agent.kill('SIGSTOP');
    await sleep(400);
    const taken = await new Lease(dir, { ttlMs: 30_000 }).acquire('s1', 'bob'); // expired: taken over
    agent.kill('SIGCONT');
    const lost = await agent.event('lost');
    expect(lost).toMatchObject({ code: 'ELEASEHELD', aborted: true });
    expect(readRecordFile(dir, 's1')).toMatchObject({ owner: 'bob', token: taken.token });
  });

  test('retries a transient renew failure, and loses the lease with ELEASEEXPIRED only past the expiry', async () => {
    const lease = new Lease(freshDir(), { ttlMs: 300 });
    const hold = await lease.hold('s1', 'alice');
    faults.fail('temp.write', 'EIO', 2); // two failed renews, then fine
    await sleep(450);
    expect(hold.lost).toBe(false);
    expect(hold.grant.expiry.getTime()).toBeGreaterThan(Date.now());
    let lostWith: unknown;
    const lostAt = new Promise<void>((resolve) => hold.signal.addEventListener('abort', () => resolve()));
    hold.signal.addEventListener('abort', () => {
      lostWith = hold.signal.reason;
    });
    const expiry = hold.grant.expiry.getTime();
    faults.fail('temp.write', 'EIO', -1); // an outage
    await lostAt;
    expect(Date.now()).toBeGreaterThanOrEqual(expiry);
    expect(lostWith).toBeInstanceOf(LeaseExpiredError);
    expect(lostWith).toMatchObject({ code: 'ELEASEEXPIRED' });
    faults.clear();
    await hold.release(); // a no-op once lost
  });

  test('an abort of the parent signal releases the hold', async () => {
    const dir = freshDir();
    const controller = new AbortController();
    const hold = await new Lease(dir).hold('s1', 'alice', { signal: controller.signal });
    controller.abort();
    // The tombstone is written before release() resolves and aborts hold.signal: wait for both.
    await until(() => hold.signal.aborted, 'the release');
    expect(readRecordFile(dir, 's1').owner).toBe('');
    expect(hold.lost).toBe(false);
  });

  test('a TTL beyond what a timer can hold renews rarely, not every millisecond', async () => {
    const renewed: unknown[] = [];
    const onRenew = (message: unknown): void => void renewed.push(message);
    diagnostics.subscribe('flocklease:renew', onRenew);
    try {
      const hold = await new Lease(freshDir(), { ttlMs: 1e12 }).hold('s1', 'alice'); // renew every ~3.3e11 ms
      await sleep(200);
      expect(renewed).toEqual([]);
      await hold.release();
    } finally {
      diagnostics.unsubscribe('flocklease:renew', onRenew);
    }
  });

  test('works over MemoryLease too', async () => {
    const lease = new MemoryLease({ ttlMs: 150 });
    const hold = await lease.hold('s1', 'alice');
    await sleep(400);
    await expect(lease.acquire('s1', 'bob')).rejects.toBeInstanceOf(LeaseHeldError);
    await hold.release();
    expect((await lease.acquire('s1', 'bob')).owner).toBe('bob');
  });
});

test('waiting and holding leave only the files a lease needs', async () => {
  const dir = freshDir();
  const lease = new Lease(dir);
  const hold = await lease.hold('s1', 'alice');
  const waiter = lease.acquire('s1', 'bob', { waitMs: 5_000 });
  await until(() => waitFiles(dir).length === 1, 'bob to queue');
  await hold.release();
  const grant = await waiter;
  await lease.release(grant);
  const names = fs.readdirSync(dir).sort();
  expect(names).toEqual([`${leaseFiles(dir, 's1').safe}.lease.json`, `${leaseFiles(dir, 's1').safe}.lock`]);
  expect(fs.statSync(join(dir, names[1]!)).size).toBe(0); // the queue is empty again
});
