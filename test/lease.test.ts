// The flock backend's own rules, beyond the shared conformance suite: every branch of acquire,
// renew and release in the spec, the failure paths (with an injected I/O layer where a fault is
// the point), corrupt records, and bad input. Real files and real flocks throughout; "another
// process" is a second Lease instance (its flocks are separate open file descriptions).
import { spawnSync } from 'node:child_process';
import diagnostics from 'node:diagnostics_channel';
import fs from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { faults, fileIO, type LeaseIO } from '../src/flock/io.js';
import { kIO, Lease, type FileLeaseOptions } from '../src/flock/lease.js';
import { formatQueue, parseQueue, type WaitQueue } from '../src/flock/queue.js';
import { LeaseCorruptError, LeaseHeldError, LeaseTimeoutError, LeaseTokenExhaustedError } from '../src/port/errors.js';
import { MAX_TOKEN } from '../src/kernel/token.js';
import type { LeaseGrant } from '../src/port/types.js';
import { freshDir } from './helpers/dirs.js';
import { holdElsewhere } from './helpers/holder.js';
import {
  fdsOf,
  isFlocked,
  leaseFiles,
  openFdCount,
  readRecordFile,
  snapshot,
  writeRecordFile,
} from './helpers/lease-files.js';

const TTL = 10_000;
const vectors = JSON.parse(fs.readFileSync(new URL('./fixtures/flocklease-vectors.json', import.meta.url), 'utf8')) as {
  corrupt_records: string[];
};

let dir: string;
let now: number;
const clock = (): number => now;
const lease = (options: FileLeaseOptions = {}, io?: Partial<LeaseIO>): Lease =>
  new Lease(dir, { ttlMs: TTL, clock, ...options, ...(io && { [kIO]: { ...fileIO, ...io } }) });

afterEach(() => faults.clear());
beforeEach(() => {
  dir = freshDir();
  now = Date.UTC(2026, 10, 29, 9, 0, 0);
});

const held = (error: unknown): boolean => error instanceof LeaseHeldError && error.code === 'ELEASEHELD';

describe('acquire', () => {
  test('free: creates the lock, the liveness lock (flocked) and the record, private to the owner', async () => {
    const grant = await lease().acquire('s1', 'alice');
    const f = leaseFiles(dir, 's1');
    expect(grant).toEqual({ sessionId: 's1', owner: 'alice', token: BigInt(now) * 1000n, expiry: new Date(now + TTL) });
    expect(readRecordFile(dir, 's1')).toEqual({
      owner: 'alice',
      token: grant.token,
      expiryMs: now + TTL,
      session: 's1',
    });
    expect(fs.readdirSync(dir).sort()).toEqual([
      `${f.safe}.${grant.token}.live`,
      `${f.safe}.lease.json`,
      `${f.safe}.lock`,
    ]);
    expect(await isFlocked(f.live(grant.token))).toBe(true);
    expect(await isFlocked(f.lock)).toBe(false); // the transition lock is held only during an operation
    expect(fs.statSync(dir).mode & 0o777).toBe(0o700);
    for (const name of fs.readdirSync(dir)) expect(fs.statSync(join(dir, name)).mode & 0o777).toBe(0o600);
  });

  test('tombstone: a released lease is taken with a greater token; the tombstone keeps owner "" and the token', async () => {
    const l = lease();
    const first = await l.acquire('s1', 'alice');
    now += 1_000;
    await l.release(first);
    expect(readRecordFile(dir, 's1')).toEqual({ owner: '', token: first.token, expiryMs: now, session: 's1' });
    expect(fs.existsSync(leaseFiles(dir, 's1').live(first.token))).toBe(false);
    const second = await lease().acquire('s1', 'bob');
    expect(second.token).toBeGreaterThan(first.token);
  });

  test('expired but alive: taken over although the old holder still holds its .live; the old holder has lost it', async () => {
    const alice = lease();
    const bob = lease();
    const a = await alice.acquire('s1', 'alice');
    const f = leaseFiles(dir, 's1');
    now += TTL; // expiry is exclusive: at the expiry instant it is expired
    const b = await bob.acquire('s1', 'bob');
    expect(b.token).toBeGreaterThan(a.token);
    expect(fs.existsSync(f.live(a.token))).toBe(false); // predecessor's .live removed
    expect(await isFlocked(f.live(b.token))).toBe(true);
    await expect(alice.renew(a)).rejects.toSatisfy(held);
    await alice.release(a); // stale: a no-op
    expect(readRecordFile(dir, 's1')).toMatchObject({ owner: 'bob', token: b.token });
    expect(await isFlocked(f.live(b.token))).toBe(true);
  });

  test('unexpired and alive: LeaseHeldError naming the holder, and nothing changes', async () => {
    const a = await lease().acquire('s1', 'alice');
    const before = snapshot(dir);
    const error = await lease()
      .acquire('s1', 'bob')
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LeaseHeldError);
    expect(error).toMatchObject({
      code: 'ELEASEHELD',
      sessionId: 's1',
      holder: { owner: 'alice', token: a.token, expiry: a.expiry },
    });
    expect(snapshot(dir)).toEqual(before);
  });

  test.each([
    ['its .live file is unlocked', true],
    ['its .live file is gone', false],
  ])('crashed holder (%s): taken over at once, well before the expiry', async (_what, leaveFile) => {
    const f = leaseFiles(dir, 's1');
    writeRecordFile(dir, 's1', { owner: 'ghost', token: 5n, expiryMs: now + TTL, session: 's1' });
    if (leaveFile) fs.writeFileSync(f.live(5n), '', { mode: 0o600 });
    const grant = await lease().acquire('s1', 'bob');
    expect(grant.token).toBe(BigInt(now) * 1000n); // max(5 + 1, wall-clock µs)
    expect(fs.existsSync(f.live(5n))).toBe(false);
    expect(readRecordFile(dir, 's1')).toMatchObject({ owner: 'bob', token: grant.token });
  });

  // Go writes the expiry with nanoseconds in its local zone. A live Go holder keeps its lease until
  // that exact instant: the port must not take over even a microsecond (or a nanosecond) early.
  test.each([
    ['4 µs after now', '2026-11-29T11:00:00.000004+02:00', false],
    ['1 ns after now', '2026-11-29T11:00:00.000000001+02:00', false],
    ['4 µs before now', '2026-11-29T10:59:59.999996+02:00', true],
    ['1 ns before now', '2026-11-29T10:59:59.999999999+02:00', true],
  ])('a live Go holder whose expiry is %s (+02:00, sub-ms digits)', async (_what, expiry, expired) => {
    const f = leaseFiles(dir, 's1');
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    fs.writeFileSync(f.record, `{"owner":"go-holder","token":5,"expiry":"${expiry}"}`, { mode: 0o600 });
    const holderFd = fileIO.lockFile(f.live(5n))!; // the Go holder's flock: alive throughout
    try {
      if (expired) {
        expect((await lease().acquire('s1', 'bob')).token).toBe(BigInt(now) * 1000n);
        return;
      }
      await expect(lease().acquire('s1', 'bob')).rejects.toSatisfy(held);
      expect(readRecordFile(dir, 's1')).toMatchObject({ owner: 'go-holder', token: 5n });
      now += 1; // the first whole millisecond past the recorded instant
      const grant = await lease().acquire('s1', 'bob');
      expect(readRecordFile(dir, 's1')).toMatchObject({ owner: 'bob', token: grant.token });
    } finally {
      fileIO.closeFile(holderFd);
    }
  });

  test('same owner with the local handle: refreshes the expiry, keeps the token', async () => {
    const l = lease();
    const first = await l.acquire('s1', 'alice');
    now += 4_000;
    const second = await l.acquire('s1', 'alice');
    expect(second.token).toBe(first.token);
    expect(second.expiry.getTime()).toBe(now + TTL);
    expect(readRecordFile(dir, 's1').expiryMs).toBe(now + TTL);
  });

  test('same owner without the local handle gets no favour: held while the holder lives', async () => {
    await lease().acquire('s1', 'alice');
    await expect(lease().acquire('s1', 'alice')).rejects.toSatisfy(held);
  });

  test('a different owner in the same process is refused without probing', async () => {
    const l = lease();
    await l.acquire('s1', 'alice');
    await expect(l.acquire('s1', 'bob')).rejects.toSatisfy(held);
  });

  test('token exhaustion: refused with LeaseTokenExhaustedError, nothing changes', async () => {
    writeRecordFile(dir, 's1', { owner: '', token: MAX_TOKEN, expiryMs: now - 1, session: 's1' });
    const before = snapshot(dir);
    await expect(lease().acquire('s1', 'alice')).rejects.toBeInstanceOf(LeaseTokenExhaustedError);
    expect(snapshot(dir)).toEqual({ ...before, [`${leaseFiles(dir, 's1').safe}.lock`]: '' });
  });

  test('the last token, 2^64-1, can still be issued (from a Go record at 2^64-2)', async () => {
    writeRecordFile(dir, 's1', { owner: 'host-4711-f00d', token: MAX_TOKEN - 1n, expiryMs: now - 1 });
    expect((await lease().acquire('s1', 'alice')).token).toBe(MAX_TOKEN);
  });

  test('tokens stay monotone when the record is lost (wall-clock floor)', async () => {
    const l = lease();
    const first = await l.acquire('s1', 'alice');
    await l.release(first);
    fs.unlinkSync(leaseFiles(dir, 's1').record);
    now += 1;
    expect((await l.acquire('s1', 'bob')).token).toBeGreaterThan(first.token);
  });
});

describe('renew', () => {
  test('the sleep-past-TTL reclaim: same token, fresh expiry, when nobody took it over', async () => {
    const l = lease();
    const grant = await l.acquire('s1', 'alice');
    now += 5 * TTL;
    const reclaimed = await l.renew(grant);
    expect(reclaimed.token).toBe(grant.token);
    expect(reclaimed.expiry.getTime()).toBe(now + TTL);
    await expect(lease().acquire('s1', 'bob')).rejects.toSatisfy(held);
  });

  test.each([
    ['the owner differs', (token: bigint) => ({ owner: 'mallory', token })],
    ['the token differs', (token: bigint) => ({ owner: 'alice', token: token + 1n })],
    ['the record is a tombstone', (token: bigint) => ({ owner: '', token })],
  ])(
    'definitive loss when %s: LeaseHeldError, the local generation is let go, the record untouched',
    async (_what, mutate) => {
      const l = lease();
      const grant = await l.acquire('s1', 'alice');
      writeRecordFile(dir, 's1', { ...mutate(grant.token), expiryMs: now + TTL, session: 's1' });
      const before = snapshot(dir);
      await expect(l.renew(grant)).rejects.toSatisfy(held);
      expect(await isFlocked(leaseFiles(dir, 's1').live(grant.token))).toBe(false);
      expect(snapshot(dir)).toEqual(before);
      await expect(l.renew(grant)).rejects.toSatisfy(held); // stays lost even if the record came back
    },
  );

  test('no local handle is a loss, even when the record names the caller', async () => {
    const grant = await lease().acquire('s1', 'alice');
    const before = snapshot(dir);
    await expect(lease().renew(grant)).rejects.toSatisfy(held);
    expect(snapshot(dir)).toEqual(before);
  });

  test('a forged grant (right token, other owner) does not disturb the real holder', async () => {
    const l = lease();
    const grant = await l.acquire('s1', 'alice');
    await expect(l.renew({ ...grant, owner: 'mallory' })).rejects.toSatisfy(held);
    await l.release({ ...grant, owner: 'mallory' });
    expect((await l.renew(grant)).token).toBe(grant.token);
    expect(await isFlocked(leaseFiles(dir, 's1').live(grant.token))).toBe(true);
  });
});

describe('release', () => {
  test('a stale release cannot touch a successor', async () => {
    const alice = lease();
    const a = await alice.acquire('s1', 'alice');
    now += TTL + 1;
    const b = await lease().acquire('s1', 'bob');
    const before = snapshot(dir);
    await alice.release(a);
    expect(snapshot(dir)).toEqual(before);
    expect(await isFlocked(leaseFiles(dir, 's1').live(b.token))).toBe(true);
    expect(fdsOf(leaseFiles(dir, 's1').live(a.token))).toEqual([]); // alice let her old handle go
  });

  test('writes the tombstone, removes the .live file, closes the handle; repeats are no-ops', async () => {
    const l = lease();
    const grant = await l.acquire('s1', 'alice');
    const live = leaseFiles(dir, 's1').live(grant.token);
    expect(fdsOf(live)).toHaveLength(1);
    await l.release(grant);
    expect(fdsOf(live)).toEqual([]);
    const after = snapshot(dir);
    await l.release(grant);
    await lease().release(grant);
    expect(snapshot(dir)).toEqual(after);
  });
});

describe('failure paths (injected faults)', () => {
  test.each(['live.open', 'live.flock', 'temp.open', 'temp.write', 'temp.fsync', 'temp.close', 'rename'])(
    'the takeover fails at %s: the old record stands, no new .live, no temp file, no fd left',
    async (step) => {
      const alice = lease();
      const a = await alice.acquire('s1', 'alice');
      now += TTL + 1;
      const before = snapshot(dir);
      const fdsBefore = openFdCount();
      faults.fail(step, 'ENOSPC');
      await expect(lease().acquire('s1', 'bob')).rejects.toMatchObject({ code: 'ENOSPC' });
      expect(snapshot(dir)).toEqual(before);
      expect(openFdCount()).toBe(fdsBefore);
      expect((await alice.renew(a)).token).toBe(a.token); // nobody took it over: alice reclaims it
    },
  );

  test('a first acquire that cannot write its record leaves no record, no .live, no fd', async () => {
    const fdsBefore = openFdCount();
    faults.fail('temp.write', 'ENOSPC');
    await expect(lease().acquire('s1', 'alice')).rejects.toMatchObject({ code: 'ENOSPC', syscall: 'write' });
    expect(fs.readdirSync(dir)).toEqual([`${leaseFiles(dir, 's1').safe}.lock`]);
    expect(openFdCount()).toBe(fdsBefore);
  });

  test('renew and release that cannot write: the error surfaces, the lease is still held and usable', async () => {
    const l = lease();
    const grant = await l.acquire('s1', 'alice');
    const before = snapshot(dir);
    faults.fail('temp.fsync', 'EIO');
    await expect(l.renew(grant)).rejects.toMatchObject({ code: 'EIO', syscall: 'fsync' });
    faults.fail('rename', 'EIO');
    await expect(l.release(grant)).rejects.toMatchObject({ code: 'EIO', syscall: 'rename' });
    expect(snapshot(dir)).toEqual(before);
    expect(await isFlocked(leaseFiles(dir, 's1').live(grant.token))).toBe(true);
    expect((await l.renew(grant)).token).toBe(grant.token);
    await l.release(grant);
    expect(readRecordFile(dir, 's1').owner).toBe('');
  });

  test('the directory fsync fails after the rename: the error surfaces, and the state is the new one', async () => {
    const l = lease();
    faults.fail('dir.fsync', 'EIO');
    await expect(l.acquire('s1', 'alice')).rejects.toMatchObject({ code: 'EIO', committed: true });
    const record = readRecordFile(dir, 's1');
    expect(record.owner).toBe('alice');
    expect(await isFlocked(leaseFiles(dir, 's1').live(record.token))).toBe(true);
    const grant = await l.acquire('s1', 'alice'); // ours: a same-owner refresh, same token
    expect(grant.token).toBe(record.token);
    faults.fail('dir.fsync', 'EIO');
    await expect(l.release(grant)).rejects.toMatchObject({ code: 'EIO', committed: true });
    expect(readRecordFile(dir, 's1').owner).toBe('');
    expect(fdsOf(leaseFiles(dir, 's1').live(grant.token))).toEqual([]);
  });

  test('a liveness file with the new token already locked by someone else is a held lease, and stays theirs', async () => {
    const { flockSync } = (await import('fs-ext')).default;
    const live = leaseFiles(dir, 's1').live(BigInt(now) * 1000n); // the token this acquire will pick
    fs.mkdirSync(dir, { recursive: true });
    const fd = fs.openSync(live, 'w');
    flockSync(fd, 'ex');
    try {
      await expect(lease().acquire('s1', 'alice')).rejects.toSatisfy(held);
      expect(fs.existsSync(live)).toBe(true);
      expect(fs.existsSync(leaseFiles(dir, 's1').record)).toBe(false);
    } finally {
      fs.closeSync(fd);
    }
  });

  test('a close that fails after the tombstone: success reported, the handle kept and closed by the next operation', async () => {
    let failClose = false;
    const closed: number[] = [];
    const l = lease(
      {},
      {
        closeFile(fd) {
          if (failClose) throw Object.assign(new Error('EIO: i/o error, close'), { code: 'EIO' });
          closed.push(fd);
          fileIO.closeFile(fd);
        },
      },
    );
    const grant = await l.acquire('s1', 'alice');
    const live = leaseFiles(dir, 's1').live(grant.token);
    const [fd] = fdsOf(live);
    failClose = true;
    await l.release(grant); // resolves: the tombstone is written
    expect(readRecordFile(dir, 's1')).toMatchObject({ owner: '', token: grant.token });
    expect(fdsOf(live)).toEqual([fd]); // still open (on the unlinked file), still tracked
    await expect(l.renew(grant)).rejects.toSatisfy(held); // released: renew is a loss
    failClose = false;
    const next = await l.acquire('s1', 'bob'); // the next operation on s1 retries the close first
    expect(closed).toContain(fd);
    expect(fdsOf(live)).toEqual([]);
    expect(next.token).toBeGreaterThan(grant.token);
  });

  test('a predecessor generation that will not close stops a takeover (fail closed)', async () => {
    let failClose = false;
    const l = lease(
      {},
      {
        closeFile(fd) {
          if (failClose) throw Object.assign(new Error('EIO: i/o error, close'), { code: 'EIO' });
          fileIO.closeFile(fd);
        },
      },
    );
    await l.acquire('s1', 'alice');
    now += TTL + 1;
    const before = snapshot(dir);
    failClose = true;
    await expect(l.acquire('s1', 'bob')).rejects.toMatchObject({ code: 'EIO' });
    expect(snapshot(dir)).toEqual(before);
    failClose = false;
    expect((await l.acquire('s1', 'bob')).owner).toBe('bob');
  });

  test("removing the predecessor's .live fails: the takeover stands and the removal is retried", async () => {
    const alice = lease();
    const a = await alice.acquire('s1', 'alice');
    now += TTL + 1;
    const bob = lease();
    faults.fail('unlink', 'EBUSY');
    const b = await bob.acquire('s1', 'bob');
    const oldLive = leaseFiles(dir, 's1').live(a.token);
    expect(fs.existsSync(oldLive)).toBe(true);
    await bob.renew(b);
    expect(fs.existsSync(oldLive)).toBe(false);
  });
});

describe('corrupt records (golden vectors)', () => {
  test.each(vectors.corrupt_records.map((text) => [text]))(
    '%j: every operation fails with ELEASECORRUPT, the file is untouched',
    async (text) => {
      const l = lease();
      const grant = await l.acquire('s1', 'alice');
      const { record } = leaseFiles(dir, 's1');
      const good = fs.readFileSync(record);
      fs.writeFileSync(record, text);
      const before = snapshot(dir);
      for (const operation of [
        () => l.acquire('s1', 'bob'),
        () => l.acquire('s1', 'alice'),
        () => l.renew(grant),
        () => l.release(grant),
      ]) {
        const error = await operation().catch((e: unknown) => e);
        expect(error).toBeInstanceOf(LeaseCorruptError);
        expect(error).toMatchObject({ code: 'ELEASECORRUPT', path: record });
        expect((error as Error).message).toContain(record);
      }
      expect(snapshot(dir)).toEqual(before);
      fs.writeFileSync(record, good); // repaired: the lease was never given up
      expect((await l.renew(grant)).token).toBe(grant.token);
    },
  );
});

describe('bad input: a typed error, nothing on disk changed', () => {
  test('a symlink planted as the record is refused, not followed', async () => {
    const target = join(freshDir(), 'victim');
    fs.writeFileSync(target, 'precious');
    fs.mkdirSync(dir, { recursive: true });
    fs.symlinkSync(target, leaseFiles(dir, 's1').record);
    const before = snapshot(dir);
    await expect(lease().acquire('s1', 'alice')).rejects.toMatchObject({
      code: 'ELEASECORRUPT',
      message: expect.stringContaining('symbolic link') as unknown,
    });
    expect(fs.readFileSync(target, 'utf8')).toBe('precious');
    expect(snapshot(dir)).toMatchObject(before);
    expect(Object.keys(snapshot(dir)).filter((n) => n.endsWith('.live'))).toEqual([]);
  });

  test('a symlink planted as the lock file is refused, not followed', async () => {
    const target = join(freshDir(), 'not-created');
    fs.mkdirSync(dir, { recursive: true });
    fs.symlinkSync(target, leaseFiles(dir, 's1').lock);
    const before = snapshot(dir);
    await expect(lease().acquire('s1', 'alice')).rejects.toBeInstanceOf(LeaseCorruptError);
    expect(fs.existsSync(target)).toBe(false);
    expect(snapshot(dir)).toEqual(before);
  });

  test("a symlink planted as a holder's .live file is refused", async () => {
    writeRecordFile(dir, 's1', { owner: 'ghost', token: 5n, expiryMs: now + TTL });
    fs.symlinkSync('/etc/hostname', leaseFiles(dir, 's1').live(5n));
    const before = snapshot(dir);
    await expect(lease().acquire('s1', 'alice')).rejects.toBeInstanceOf(LeaseCorruptError);
    expect(snapshot(dir)).toEqual({ ...before, [`${leaseFiles(dir, 's1').safe}.lock`]: '' });
  });

  test.each([
    ['is too big for a lease file', (path: string) => fs.writeFileSync(path, 'x'.repeat(64 * 1024 + 1))],
    ['is not a regular file', (path: string) => fs.mkdirSync(path)],
  ])('a record that %s: ELEASECORRUPT naming it, nothing changed', async (problem, plant) => {
    fs.mkdirSync(dir, { recursive: true });
    const { record } = leaseFiles(dir, 's1');
    plant(record);
    const before = snapshot(dir);
    await expect(lease().acquire('s1', 'alice')).rejects.toMatchObject({
      code: 'ELEASECORRUPT',
      path: record,
      message: `${record} ${problem}`,
    });
    expect(snapshot(dir)).toEqual({ ...before, [`${leaseFiles(dir, 's1').safe}.lock`]: '' });
  });

  test('a lease dir that is a file: ENOTDIR, the file untouched', async () => {
    const file = join(freshDir(), 'file');
    fs.writeFileSync(file, 'data');
    await expect(new Lease(file).acquire('s1', 'alice')).rejects.toMatchObject({ code: 'ENOTDIR' });
    expect(fs.readFileSync(file, 'utf8')).toBe('data');
  });

  test.each([
    [{ ttlMs: Number.NaN }, RangeError],
    [{ ttlMs: Infinity }, RangeError],
    [{ ttlMs: 1e20 }, RangeError], // the expiry would be past year 9999
    [{ ttlMs: '30s' }, TypeError],
    [{ clock: 5 }, TypeError],
    [{ clock: () => Number.NaN }, TypeError],
    [{ transitionTimeoutMs: 0 }, RangeError],
    [{ transitionTimeoutMs: -1 }, RangeError],
  ])('options %o → %o before any file is created', (options, type) => {
    const target = join(dir, 'never-created');
    expect(() => new Lease(target, options as FileLeaseOptions)).toThrow(type);
    expect(fs.existsSync(target)).toBe(false);
  });

  test('missing or non-positive ttlMs means 30 000 ms', () => {
    expect(new Lease(dir).ttlMs).toBe(30_000);
    expect(new Lease(dir, { ttlMs: 0 }).ttlMs).toBe(30_000);
    expect(new Lease(dir, { ttlMs: -5 }).ttlMs).toBe(30_000);
    expect(new Lease(dir, { ttlMs: 250 }).ttlMs).toBe(250);
  });

  test('ids and owners must be non-empty, well-formed strings; grants must have the right shape', async () => {
    const l = lease();
    const grant = await l.acquire('s1', 'alice');
    const before = snapshot(dir);
    const calls: Array<() => Promise<unknown>> = [
      () => l.acquire('\uD800', 'alice'), // a lone surrogate has no UTF-8 form
      () => l.acquire('s2', 'al\uDC00ice'),
      () => l.acquire('s2', 'alice', { signal: 'no' as unknown as AbortSignal }),
      () => l.acquire('s2', 'alice', 5 as unknown as undefined),
      () => l.renew({ ...grant, token: -1n }),
      () => l.renew({ ...grant, token: MAX_TOKEN + 1n }),
      () => l.renew({ ...grant, expiry: new Date(Number.NaN) }),
      () => l.release({ ...grant, sessionId: '' }),
      () => l.release(null as unknown as LeaseGrant),
    ];
    for (const call of calls)
      await expect(call()).rejects.toSatisfy((e) => e instanceof TypeError || e instanceof RangeError);
    expect(snapshot(dir)).toEqual(before);
    expect(() => {
      (grant as { token: bigint }).token = 1n;
    }).toThrow(TypeError); // grants are frozen
  });
});

describe('the transition lock', () => {
  /** Holds `<id>.lock` the way another process in the middle of an operation would. */
  async function holdTransitionLock(id: string): Promise<() => void> {
    const { flockSync } = (await import('fs-ext')).default;
    fs.mkdirSync(dir, { recursive: true });
    const fd = fs.openSync(leaseFiles(dir, id).lock, 'a');
    flockSync(fd, 'ex');
    return () => fs.closeSync(fd);
  }

  test('a wedged holder makes others time out with LeaseTimeoutError, not hang', async () => {
    const unlock = await holdTransitionLock('s1');
    const started = performance.now();
    const error = await new Lease(dir, { transitionTimeoutMs: 150 }).acquire('s1', 'alice').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LeaseTimeoutError);
    expect(error).toMatchObject({ code: 'ELEASETIMEOUT', sessionId: 's1' });
    expect(performance.now() - started).toBeGreaterThanOrEqual(140);
    unlock();
    expect((await new Lease(dir).acquire('s1', 'alice')).owner).toBe('alice');
  });

  test('an abort while waiting rejects with the signal reason and leaves nothing behind', async () => {
    const unlock = await holdTransitionLock('s1');
    const controller = new AbortController();
    const pending = new Lease(dir).acquire('s1', 'alice', { signal: controller.signal });
    setTimeout(() => controller.abort(new Error('operator gave up')), 30);
    await expect(pending).rejects.toThrow('operator gave up');
    unlock();
    expect(fs.existsSync(leaseFiles(dir, 's1').record)).toBe(false);
  });

  test('proceeds as soon as the holder lets go', async () => {
    const unlock = await holdTransitionLock('s1');
    const pending = new Lease(dir).acquire('s1', 'alice');
    setTimeout(unlock, 50);
    expect((await pending).owner).toBe('alice');
  });

  test('operations of one process on one id queue in order; an aborted one gives up its place', async () => {
    const l = lease();
    const grant = await l.acquire('s1', 'alice');
    const controller = new AbortController();
    const results = await Promise.allSettled([
      l.renew(grant),
      l.renew(grant, { signal: controller.signal }),
      l.release(grant),
      l.acquire('s1', 'bob'),
      (controller.abort(new Error('not needed')), Promise.resolve()),
    ]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled', 'fulfilled', 'fulfilled']);
    expect((results[3] as PromiseFulfilledResult<LeaseGrant>).value.owner).toBe('bob');
  });
});

describe('descriptors', () => {
  test('the held .live descriptor is close-on-exec', async () => {
    const grant = await lease().acquire('s1', 'alice');
    const [fd] = fdsOf(leaseFiles(dir, 's1').live(grant.token));
    const flags = /flags:\s+(\d+)/.exec(fs.readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8'))![1]!;
    expect(parseInt(flags, 8) & 0o2000000).toBe(0o2000000); // O_CLOEXEC
  });

  test('a cycle of operations leaks no descriptor', async () => {
    const l = lease();
    const before = openFdCount();
    for (let i = 0; i < 20; i++) {
      const grant = await l.acquire(`s${i % 3}`, 'alice');
      await l.renew(grant);
      await l.release(grant);
    }
    expect(openFdCount()).toBe(before);
  });
});

describe('diagnostics_channel events', () => {
  const seen: Array<[string, Record<string, unknown>]> = [];
  const names = ['acquire', 'takeover', 'renew', 'reclaim', 'release', 'loss'];
  const subscribers = names.map(
    (name) =>
      [`flocklease:${name}`, (message: unknown) => seen.push([name, message as Record<string, unknown>])] as const,
  );
  beforeEach(() => {
    seen.length = 0;
    for (const [channel, fn] of subscribers) diagnostics.subscribe(channel, fn);
  });
  afterEach(() => {
    for (const [channel, fn] of subscribers) diagnostics.unsubscribe(channel, fn);
  });

  test('acquire, renew, reclaim, release, takeover (released / expired / crashed) and loss are published', async () => {
    const alice = lease();
    const bob = lease();
    const a = await alice.acquire('s1', 'alice');
    await alice.renew(a);
    now += TTL;
    await alice.renew(a); // reclaim
    await alice.release(a);
    const b = await bob.acquire('s1', 'bob'); // takeover: released
    now += TTL;
    const c = await alice.acquire('s1', 'carol'); // takeover: expired
    await expect(bob.renew(b)).rejects.toSatisfy(held); // loss
    writeRecordFile(dir, 's2', { owner: 'ghost', token: 3n, expiryMs: now + TTL });
    await bob.acquire('s2', 'bob'); // takeover: crashed
    const summary = seen.map(([name, m]) => [
      name,
      (m.reason as string | undefined) ?? (m.grant as LeaseGrant | undefined)?.owner ?? m.owner,
    ]);
    expect(summary).toEqual([
      ['acquire', 'alice'],
      ['renew', 'alice'],
      ['reclaim', 'alice'],
      ['release', 'alice'],
      ['acquire', 'bob'],
      ['takeover', 'released'],
      ['acquire', 'carol'],
      ['takeover', 'expired'],
      ['loss', 'bob'],
      ['acquire', 'bob'],
      ['takeover', 'crashed'],
    ]);
    expect(seen[7]![1]).toMatchObject({ lease: alice, grant: c, previous: { owner: 'bob', token: b.token } });
    expect(seen[8]![1]).toMatchObject({ lease: bob, sessionId: 's1', token: b.token, holder: { owner: 'carol' } });
  });
});

describe('the event loop', () => {
  test('is not blocked while a record is fsynced on disk: the commit runs on a worker thread', async () => {
    const l = new Lease(freshDir(), { ttlMs: TTL }); // /tmp: a disk file system, so commits go off-thread
    await l.release(await l.acquire('warm-up', 'alice'));
    faults.stall('temp.fsync', 200); // a slow disk: the fsync takes 200 ms
    let ticks = 0;
    const ticker = setInterval(() => ticks++, 5);
    const started = performance.now();
    const grant = await l.acquire('s1', 'alice');
    const took = performance.now() - started;
    clearInterval(ticker);
    expect(took).toBeGreaterThanOrEqual(195);
    expect(ticks).toBeGreaterThanOrEqual(10); // ~40 if the loop ran freely, 0 if the fsync blocked it
    expect(grant.owner).toBe('alice');
  });
});

describe('the addon: every system call a named fault point, every argument checked', () => {
  test.each([
    ['wait.flock', 'flock'],
    ['queue.write', 'pwrite'],
  ])('a waiting acquire whose %s fails rejects with that error; the holder keeps its lease', async (step, syscall) => {
    const holder = await lease().acquire('s1', 'alice');
    faults.fail(step, 'EIO');
    const error = await lease()
      .acquire('s1', 'bob', { waitMs: 5_000 })
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'EIO', syscall });
    expect(readRecordFile(dir, 's1')).toMatchObject({ owner: 'alice', token: holder.token });
    expect(await isFlocked(leaseFiles(dir, 's1').live(holder.token))).toBe(true);
  });

  test("readRecord: an ASCII record's text, any other record's bytes; both read the same", async () => {
    const ascii = await lease().acquire('s1', 'alice');
    const other = await lease().acquire('s2', 'wörker ☃');
    const text = fileIO.readRecord(leaseFiles(dir, 's1').record);
    const bytes = fileIO.readRecord(leaseFiles(dir, 's2').record);
    expect(typeof text).toBe('string');
    expect(text).toBe(fs.readFileSync(leaseFiles(dir, 's1').record, 'latin1'));
    expect(bytes).toBeInstanceOf(Uint8Array);
    expect(Buffer.from(bytes as Uint8Array)).toEqual(fs.readFileSync(leaseFiles(dir, 's2').record));
    expect(fileIO.readRecord(join(dir, 'none.lease.json'))).toBeUndefined();
    // Another Lease reads both from disk alone, and names each holder.
    for (const [id, grant] of [
      ['s1', ascii],
      ['s2', other],
    ] as const) {
      const error = await lease()
        .acquire(id, 'bob')
        .catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'ELEASEHELD', holder: { owner: grant.owner, token: grant.token } });
    }
  });

  test("readLockData: an ASCII queue's text, any other queue's bytes; both read the same", () => {
    fs.mkdirSync(dir, { recursive: true });
    const lockFd = (name: string): number => fileIO.tryLockTransition(join(dir, name)) as number;
    const [ascii, other, empty] = [lockFd('a.lock'), lockFd('b.lock'), lockFd('c.lock')];
    try {
      const queue = (owner: string): WaitQueue => ({ waiters: [{ ticket: 7, owner, ttlMs: TTL }], freeSince: 0 });
      fileIO.writeLockData(ascii, formatQueue(queue('alice')));
      fileIO.writeLockData(other, formatQueue(queue('wörker ☃')));
      const text = fileIO.readLockData(ascii);
      const bytes = fileIO.readLockData(other);
      expect(text).toBe(fs.readFileSync(join(dir, 'a.lock'), 'latin1'));
      expect(bytes).toBeInstanceOf(Uint8Array);
      expect(Buffer.from(bytes as Uint8Array)).toEqual(fs.readFileSync(join(dir, 'b.lock')));
      expect(parseQueue(text)).toEqual(queue('alice'));
      expect(parseQueue(bytes)).toEqual(queue('wörker ☃'));
      expect(fileIO.readLockData(empty)).toBeUndefined();
    } finally {
      for (const fd of [ascii, other, empty]) fileIO.unlockTransition(fd);
    }
  });

  // Both reads go straight into a buffer first, and look at the file with fstat only when the read
  // does not settle it (native/src/files.c, read_record_file and read_lock_data).
  test('readRecord and readLockData read every size whole, past the first read too, up to the limit', () => {
    fs.mkdirSync(dir, { recursive: true });
    const record = join(dir, 'r.lease.json');
    const lockFd = fileIO.tryLockTransition(join(dir, 'q.lock')) as number;
    try {
      for (const size of [1, 4095, 4096, 4097, 10_000, 64 * 1024]) {
        const text = 'x'.repeat(size);
        fs.writeFileSync(record, text);
        expect(fileIO.readRecord(record)).toBe(text);
        fileIO.writeLockData(lockFd, text);
        expect(fileIO.readLockData(lockFd)).toBe(text);
      }
      const bytes = Buffer.from(`${'☃'.repeat(2_000)}`); // 6 000 bytes, not ASCII
      fs.writeFileSync(record, bytes);
      expect(Buffer.from(fileIO.readRecord(record) as Uint8Array)).toEqual(bytes);
      fs.writeFileSync(record, '');
      expect(fileIO.readRecord(record)).toBe('');
      fs.writeFileSync(record, 'x'.repeat(64 * 1024 + 1));
      expect(() => fileIO.readRecord(record)).toThrow(
        expect.objectContaining({ code: 'ELEASECORRUPT', message: `${record} is too big for a lease file` }),
      );
    } finally {
      fileIO.unlockTransition(lockFd);
    }
  });

  test('a queue longer than the first read is read whole', async () => {
    const files = leaseFiles(dir, 's1');
    fs.mkdirSync(dir, { recursive: true });
    const waiters = Array.from({ length: 120 }, (_, i) => ({
      ticket: i + 1,
      owner: `w${i}-${'o'.repeat(30)}`,
      ttlMs: TTL,
    }));
    const text = formatQueue({ waiters, freeSince: 0 });
    expect(text.length).toBeGreaterThan(4096);
    fs.writeFileSync(files.lock, text);
    // The front waiter lives: a free lease is reserved for it, which only a whole queue says.
    const front = await holdElsewhere(join(dir, `${files.safe}.1.wait`));
    try {
      const refused = await lease()
        .acquire('s1', 'eager')
        .catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(LeaseHeldError);
      expect((refused as Error).message).toContain('reserved for a queued waiter (ticket 1)');
    } finally {
      await front.end();
    }
  });

  test.each([
    ['a FIFO', (path: string) => expect(spawnSync('mkfifo', [path]).status).toBe(0)],
    ['a directory', (path: string) => fs.mkdirSync(path)],
  ])('%s where a record or a liveness file should be: ELEASECORRUPT from readRecord and probeLive', (_, plant) => {
    fs.mkdirSync(dir, { recursive: true });
    const path = join(dir, 'planted');
    plant(path);
    for (const read of [() => fileIO.readRecord(path), () => fileIO.probeLive(path)]) {
      expect(read).toThrow(
        expect.objectContaining({ code: 'ELEASECORRUPT', message: `${path} is not a regular file` }),
      );
    }
  });

  test('a bad descriptor is a TypeError, not a stat of whatever fd -1 would be', () => {
    expect(() => fileIO.sameFile(-1, join(dir, 'x'))).toThrow(TypeError);
    expect(() => fileIO.readLockData(-1)).toThrow(TypeError);
  });

  test('a commit plan without its strings is a TypeError and creates nothing', async () => {
    fs.mkdirSync(dir, { recursive: true });
    const plan = { record: join(dir, 'r.lease.json'), data: undefined as unknown as string };
    await expect(fileIO.commit(dir, plan)).rejects.toThrow(TypeError);
    expect(fs.readdirSync(dir)).toEqual([]);
  });
});
