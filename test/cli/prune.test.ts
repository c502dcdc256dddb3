// `flocklease prune`: removes old released records and leftovers, never a live or unexpired
// lease, never an id with waiters; --dry-run changes nothing; tokens stay monotone; and a prune
// looping against processes that acquire and release the same id never lets two hold it.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, test } from 'vitest';
import { fileIO } from '../../src/flock/io.js';
import { Lease } from '../../src/flock/lease.js';
import { inspectLeaseDir, pruneLeaseDir } from '../../src/flock/operator/index.js';
import { LeaseAgent } from '../helpers/agent.js';
import { filesystems, freshDir } from '../helpers/dirs.js';
import { leaseFiles, snapshot, writeRecordFile } from '../helpers/lease-files.js';
import { cli, until } from './cli.js';

const RACE = fileURLToPath(new URL('./fixtures/prune-race.mjs', import.meta.url));
const HOUR = 3_600_000;

/** A directory with one lease in every state, old and young tombstones, and leftovers. */
async function populated(): Promise<{ dir: string; holder: LeaseAgent; keep: string[]; gone: string[] }> {
  const dir = freshDir();
  const holder = await LeaseAgent.start(dir, 60_000);
  await holder.acquire('held', 'alice');
  const crasher = await LeaseAgent.start(dir, 60_000);
  await crasher.acquire('crashed', 'bob');
  crasher.kill('SIGKILL');
  await crasher.exited;
  const lease = new Lease(dir, { ttlMs: 60_000 });
  await lease.release(await lease.acquire('young-tombstone', 'carol'));
  const f = (id: string) => leaseFiles(dir, id);
  // A tombstone released two days ago (a lease this project released, with its .lock).
  writeRecordFile(dir, 'old-tombstone', {
    owner: '',
    token: 1000n,
    expiryMs: Date.now() - 48 * HOUR,
    session: 'old-tombstone',
  });
  fs.writeFileSync(f('old-tombstone').lock, '');
  // Expired two days ago, holder gone: as good as released. Expired a minute ago: too young.
  writeRecordFile(dir, 'old-expired', {
    owner: 'dave',
    token: 2000n,
    expiryMs: Date.now() - 48 * HOUR,
    session: 'old-expired',
  });
  writeRecordFile(dir, 'young-expired', {
    owner: 'erin',
    token: 3000n,
    expiryMs: Date.now() - 60_000,
    session: 'young-expired',
  });
  // A tombstone whose token is ahead of the wall clock (a Go process's +1, or a clock stepped
  // back): pruning it would let the next takeover issue a smaller token.
  const ahead = BigInt(Date.now() + 10 * HOUR) * 1000n;
  writeRecordFile(dir, 'token-ahead', {
    owner: '',
    token: ahead,
    expiryMs: Date.now() - 48 * HOUR,
    session: 'token-ahead',
  });
  // Leftovers: an orphan .live of the held id, a temp file, a dead waiter's file, a stray lock.
  fs.writeFileSync(f('held').live(7n), '');
  fs.writeFileSync(`${f('young-tombstone').record}.4242-00000001.tmp`, '{"ow');
  fs.writeFileSync(join(dir, `${f('young-tombstone').safe}.1700000000000000.wait`), '');
  fs.writeFileSync(f('nothing-left').lock, '');
  fs.writeFileSync(join(dir, `${f('young-tombstone').safe}.corrupt-20260101T000000000Z`), 'kept');
  fs.writeFileSync(join(dir, 'README.operator'), 'not a lease file');
  const name = (path: string): string => path.slice(dir.length + 1);
  const keep = [
    name(f('held').record),
    name(f('held').lock),
    name(f('crashed').record),
    name(f('young-tombstone').record),
    name(f('young-expired').record),
    name(f('token-ahead').record),
    `${f('young-tombstone').safe}.corrupt-20260101T000000000Z`,
    'README.operator',
  ];
  const gone = [
    name(f('old-tombstone').record),
    name(f('old-tombstone').lock),
    name(f('old-expired').record),
    name(f('held').live(7n)),
    `${name(f('young-tombstone').record)}.4242-00000001.tmp`,
    `${f('young-tombstone').safe}.1700000000000000.wait`,
    name(f('nothing-left').lock),
  ];
  return { dir, holder, keep, gone };
}

describe('flocklease prune', () => {
  test('removes old tombstones, dead expired records and leftovers; never a held, crashed-unexpired or young lease', async () => {
    const { dir, holder, keep, gone } = await populated();
    const held = inspectLeaseDir(dir, { id: 'held' }).leases[0]!;
    const crashedLive = leaseFiles(dir, 'crashed').live(inspectLeaseDir(dir, { id: 'crashed' }).leases[0]!.token!);

    const result = await cli(['prune', dir, '--older-than', '1h']);
    expect(result.code).toBe(0);
    const files = fs.readdirSync(dir);
    for (const name of keep) expect(files, name).toContain(name);
    for (const name of gone) expect(files, name).not.toContain(name);
    expect(fs.existsSync(crashedLive)).toBe(true); // a crashed, unexpired lease: left for the next acquire
    expect(result.stdout).toMatch(/^removed .*old-tombstone-\w+\.lease\.json {2}\(record: released 2d0h ago\)$/m);
    expect(result.stdout).toMatch(
      /^removed .*old-expired-\w+\.lease\.json {2}\(record: expired 2d0h ago, holder gone\)$/m,
    );
    expect(result.stdout).toMatch(/^Removed 7 files \(2 records\); 5 ids left alone\.$/m);
    // The leases it kept are counted among the ids left alone, each with its reason.
    expect(result.stdout).toMatch(/^left alone held: held$/m);
    expect(result.stdout).toMatch(/^left alone crashed: crashed, not yet expired$/m);
    expect(result.stdout).toMatch(/^left alone young-tombstone: released \d+m?s ago: newer than the prune age$/m);
    expect(result.stdout).toMatch(/^left alone young-expired: expired 1m ago, holder gone: newer than the prune age$/m);
    expect(result.stdout).toMatch(/^left alone token-ahead: released 2d0h ago: its token is ahead of the clock$/m);

    // The holder never noticed.
    expect(inspectLeaseDir(dir, { id: 'held' }).leases[0]).toMatchObject({
      state: 'held',
      token: held.token,
      pid: holder.pid,
    });
    expect((await holder.call({ op: 'renew' })).ok).toBe(true);
    // Nothing more to do with the same age; with age 0 the young tombstone and the young dead
    // expired record go too; the token ahead of the clock never does.
    expect((await cli(['prune', dir, '--older-than', '1h'])).stdout).toMatch(
      /^Removed 0 files \(0 records\); 5 ids left alone\.$/m,
    );
    await cli(['prune', dir, '--older-than', '0']);
    expect(
      inspectLeaseDir(dir)
        .leases.map((row) => row.id)
        .sort(),
    ).toEqual(['crashed', 'held', 'token-ahead']);
  });

  test('--dry-run prints exactly what a prune removes, and changes nothing', async () => {
    const { dir, gone } = await populated();
    const before = snapshot(dir);
    const dry = await cli(['prune', dir, '--older-than', '1h', '--dry-run']);
    expect(dry.code).toBe(0);
    expect(snapshot(dir)).toEqual(before);
    const wouldGo = [...dry.stdout.matchAll(/^would remove (\S+)/gm)].map((m) => m[1]).sort();
    expect(wouldGo).toEqual([...gone].sort());
    expect(dry.stdout).toMatch(/^Dry run: would remove 7 files \(2 records\); 5 ids left alone\.$/m);
    const json = JSON.parse((await cli(['prune', dir, '--older-than', '1h', '--dry-run', '--json'])).stdout) as {
      dryRun: boolean;
      removed: Array<{ path: string }>;
    };
    expect(json.dryRun).toBe(true);
    expect(json.removed.map((r) => r.path.slice(dir.length + 1)).sort()).toEqual(wouldGo);
    expect(snapshot(dir)).toEqual(before);
    const real = await cli(['prune', dir, '--older-than', '1h']);
    expect([...real.stdout.matchAll(/^removed (\S+)/gm)].map((m) => m[1]).sort()).toEqual(wouldGo);
  });

  test("the Go original's temp records: inspect lists them; prune removes them once a minute and --older-than old", async () => {
    const dir = freshDir();
    const minutesAgo = (name: string, minutes: number): string => {
      const path = join(dir, name);
      fs.writeFileSync(path, '{"owner":"go');
      const at = (Date.now() - minutes * 60_000) / 1000;
      fs.utimesSync(path, at, at);
      return name;
    };
    const old = minutesAgo('.lease-3141592653.json.tmp', 120);
    const recent = minutesAgo('.lease-42.json.tmp', 0.1); // a Go write may still be in progress
    const notGo = minutesAgo('.lease-notes.json.tmp', 120); // not os.CreateTemp's pattern
    const kinds = inspectLeaseDir(dir).leftovers.map((l) => [l.kind, l.path.slice(dir.length + 1)]);
    expect(kinds).toEqual([
      ['go-temp', old],
      ['go-temp', recent],
    ]);
    expect((await cli(['inspect', dir])).stdout).toMatch(
      new RegExp(`^  ${old.replace(/\./g, '\\.')}  go-temp  the Go original's interrupted record write$`, 'm'),
    );
    // Younger than --older-than: kept.
    expect((await cli(['prune', dir, '--older-than', '3h'])).stdout).toBe(
      'Removed 0 files (0 records); 0 ids left alone.\n',
    );
    expect((await cli(['prune', dir, '--older-than', '0', '--dry-run'])).stdout).toMatch(
      /^would remove \.lease-3141592653\.json\.tmp {2}\(go-temp: /m,
    );
    const result = await cli(['prune', dir, '--older-than', '0']);
    expect(result.stdout).toMatch(
      /^removed \.lease-3141592653\.json\.tmp {2}\(go-temp: the Go original's interrupted record write, written 2h0m ago\)$/m,
    );
    expect(fs.readdirSync(dir).sort()).toEqual([recent, notGo].sort());
  });

  test('leaves an id with queued waiters alone', async () => {
    const dir = freshDir();
    const holder = await LeaseAgent.start(dir, 60_000);
    await holder.acquire('busy', 'alice');
    const waiter = await LeaseAgent.start(dir, 60_000);
    void waiter.call({ op: 'acquire', id: 'busy', owner: 'bob', waitMs: 60_000 }).catch(() => {});
    await until(
      () => (inspectLeaseDir(dir, { id: 'busy' }).leases[0]!.waiters.length === 1 ? true : undefined),
      'the waiter to queue',
    );
    fs.writeFileSync(leaseFiles(dir, 'busy').live(9n), ''); // an orphan it would otherwise remove
    const before = snapshot(dir);
    const result = await cli(['prune', dir, '--older-than', '0']);
    expect(result.stdout).toMatch(/^left alone busy: 1 queued waiter$/m);
    expect(snapshot(dir)).toEqual(before);
    // --id limits a prune to one id: the others are not looked at.
    const lease = new Lease(dir);
    await lease.release(await lease.acquire('done', 'me'));
    await lease.release(await lease.acquire('also-done', 'me'));
    await until(
      () =>
        BigInt(Date.now()) * 1000n > inspectLeaseDir(dir, { id: 'also-done' }).leases[0]!.token! ? true : undefined,
      'the clock to pass the token',
    );
    const one = await cli(['prune', dir, '--older-than', '0', '--id', 'done']);
    expect(one.stdout).toMatch(/^Removed 2 files \(1 record\); 0 ids left alone\.$/m);
    expect(
      inspectLeaseDir(dir)
        .leases.map((row) => row.id)
        .sort(),
    ).toEqual(['also-done', 'busy']);
  });

  test('never hangs on a busy transition lock, and skips a planted symlink: those ids are left alone and reported', async () => {
    const dir = freshDir();
    const lease = new Lease(dir);
    await lease.release(await lease.acquire('stuck', 'me'));
    await lease.release(await lease.acquire('linked', 'me'));
    // A process stopped inside an operation on "stuck" holds its transition lock.
    const fd = fileIO.tryLockTransition(leaseFiles(dir, 'stuck').lock) as number;
    const linked = leaseFiles(dir, 'linked');
    fs.rmSync(linked.lock);
    fs.symlinkSync('/etc/hostname', linked.lock);
    try {
      const started = performance.now();
      const result = await cli(['prune', dir, '--older-than', '0', '--lock-timeout', '200ms']);
      expect(performance.now() - started).toBeLessThan(10_000);
      expect(result.code).toBe(0);
      expect(result.stdout).toMatch(/^left alone stuck: its transition lock stayed busy for 200 ms$/m);
      expect(result.stdout).toMatch(/^left alone linked: .*is a symbolic link; lease files are never followed$/m);
      expect(
        inspectLeaseDir(dir)
          .leases.map((row) => row.id)
          .sort(),
      ).toEqual(['linked', 'stuck']);
      // repair and release --force give up too, with 75 (try again later).
      for (const args of [
        ['repair', dir, '--id', 'stuck'],
        ['release', dir, '--id', 'stuck', '--force'],
      ]) {
        const busy = await cli([...args, '--lock-timeout', '200ms']);
        expect(busy.code).toBe(75);
        expect(busy.stderr).toMatch(/was not free within 200 ms/);
      }
    } finally {
      fileIO.unlockTransition(fd);
    }
    expect(fs.readlinkSync(linked.lock)).toBe('/etc/hostname');
  });

  test('tokens stay monotone across a prune that removes everything of an id', async () => {
    const dir = freshDir();
    const lease = new Lease(dir);
    const first = await lease.acquire('job', 'me');
    await lease.release(first);
    await until(() => (BigInt(Date.now()) * 1000n > first.token ? true : undefined), 'the clock to pass the token');
    const result = await pruneLeaseDir(dir, { olderThanMs: 0 });
    expect(result.removed.map((r) => r.kind).sort()).toEqual(['lock', 'record']);
    expect(fs.readdirSync(dir)).toEqual([]); // nothing of the id is left: no record to take the token from
    const second = await lease.acquire('job', 'me');
    expect(second.token).toBeGreaterThan(first.token);
  });

  test.each(filesystems)(
    'on %s, a prune looping against three processes that acquire and release one id: never two holders, never two transitions, tokens increase',
    async (fsName, root) => {
      const dir = freshDir(root);
      const state = freshDir();
      const DURATION = 2500;
      // Holders hold the lease for a pause and then wait 2–6 pauses: it is often free, so prune
      // removes it (on disk, where every transition fsyncs, a longer pause leaves it free as often).
      const PAUSE_MS = fsName === 'tmpfs' ? '1' : '3';
      const start = (args: string[]) => {
        const child = spawn(process.execPath, [RACE, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
        let out = '';
        let err = '';
        child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
        child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
        return once(child, 'close').then(([code]) => {
          expect(err).toBe(''); // a violation is also described here
          expect(code).toBe(0);
          return JSON.parse(out) as Record<string, number>;
        });
      };
      const [pruner, ...workers] = await Promise.all([
        start(['pruner', dir, String(DURATION), state]),
        ...['w1', 'w2', 'w3'].map((owner) => start(['worker', dir, 'job', owner, String(DURATION), PAUSE_MS, state])),
      ]);
      for (const w of workers) expect(w).toMatchObject({ transitions: 0, holders: 0 });
      expect(pruner).toMatchObject({ transitions: 0, holders: 0 });
      // The race was real: the pruner removed records and lock files while the workers ran.
      expect(pruner.records).toBeGreaterThan(0);
      expect(pruner.locks).toBeGreaterThan(0);
      const cycles = workers.reduce((sum, w) => sum + w.cycles!, 0);
      expect(cycles).toBeGreaterThan(20);
      const tokens = fs.readFileSync(join(state, 'tokens.log'), 'utf8').trim().split('\n').map(BigInt);
      expect(tokens).toHaveLength(cycles);
      for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!, `token ${i}`).toBe(true);
    },
    60_000,
  );
});
