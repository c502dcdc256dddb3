// `flocklease inspect`: every state, the holder's PID, waiters, leftovers, --json, and that
// reading disturbs nothing. Real processes, real directories.
import fs from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, test } from 'vitest';
import { Lease } from '../../src/flock/lease.js';
import { inspectLeaseDir } from '../../src/flock/operator/index.js';
import { LeaseAgent } from '../helpers/agent.js';
import { freshDir } from '../helpers/dirs.js';
import { leaseFiles, snapshot, writeRecordFile } from '../helpers/lease-files.js';
import { cli, until } from './cli.js';

const HOUR = 3_600_000;

interface JsonRow {
  kind: string;
  id: string;
  safeId: string;
  state: string;
  owner: string | null;
  token: string | null;
  expiry: string | null;
  expiresInMs: number | null;
  locked: boolean | null;
  pid: number | null;
  waiters: number;
  queue: Array<{ ticket: number; owner: string | null; pid: number | null }>;
  path: string;
  problem: string | null;
}

describe('flocklease inspect', () => {
  test('shows every state: held with its PID, crashed (SIGKILLed), expired, released, corrupt; waiters; leftovers', async () => {
    const dir = freshDir();
    // held, by another process
    const holder = await LeaseAgent.start(dir, 60_000);
    const held = await holder.acquire('held-1', 'alice');
    // crashed: a holder SIGKILLed while its lease is unexpired
    const crasher = await LeaseAgent.start(dir, 60_000);
    const crashed = await crasher.acquire('crashed-1', 'bob');
    crasher.kill('SIGKILL');
    await crasher.exited;
    // expired, its holder (this process) still running; and expired with its holder gone
    const short = new Lease(dir, { ttlMs: 100 });
    await short.acquire('expired-live', 'carol');
    writeRecordFile(dir, 'expired-dead', {
      owner: 'dave',
      token: 17n,
      expiryMs: Date.now() - HOUR,
      session: 'expired-dead',
    });
    // released
    const lease = new Lease(dir, { ttlMs: 60_000 });
    const released = await lease.acquire('released-1', 'erin');
    await lease.release(released);
    // corrupt
    fs.writeFileSync(leaseFiles(dir, 'corrupt-1').record, '{"owner":"frank","token":12', { mode: 0o600 });
    // a queued waiter behind the held lease
    const waiter = await LeaseAgent.start(dir, 60_000);
    void waiter.call({ op: 'acquire', id: 'held-1', owner: 'grace', waitMs: 60_000 }).catch(() => {});
    // leftovers
    const r = leaseFiles(dir, 'released-1');
    fs.writeFileSync(r.live(5n), '');
    fs.writeFileSync(`${r.record}.999-0000000a.tmp`, '{"owner"');
    fs.writeFileSync(join(dir, `${leaseFiles(dir, 'gone').safe}.lock`), '');
    fs.writeFileSync(join(dir, `${r.safe}.corrupt-20260101T000000000Z`), 'garbage');
    await sleep(150); // expired-live expires

    const rows = await until(async () => {
      const result = await cli(['inspect', dir, '--json']);
      const parsed = JSON.parse(result.stdout) as JsonRow[];
      return parsed.find((row) => row.id === 'held-1')?.waiters === 1 ? parsed : undefined;
    }, 'the waiter to queue');

    const byId = (id: string): JsonRow => rows.find((row) => row.kind === 'lease' && row.id === id)!;
    expect(byId('held-1')).toMatchObject({
      state: 'held',
      owner: 'alice',
      token: held.token,
      locked: true,
      pid: holder.pid,
      waiters: 1,
    });
    expect(byId('held-1').queue).toEqual([{ ticket: expect.any(Number) as unknown, owner: 'grace', pid: waiter.pid }]);
    expect(byId('held-1').expiresInMs).toBeGreaterThan(50_000);
    expect(byId('crashed-1')).toMatchObject({
      state: 'crashed',
      owner: 'bob',
      token: crashed.token,
      locked: false,
      pid: null,
    });
    expect(byId('expired-live')).toMatchObject({ state: 'expired', owner: 'carol', locked: true, pid: process.pid });
    expect(byId('expired-dead')).toMatchObject({
      state: 'expired',
      owner: 'dave',
      token: '17',
      locked: false,
      pid: null,
    });
    expect(byId('expired-dead').expiresInMs).toBeLessThan(-HOUR + 60_000);
    expect(byId('released-1')).toMatchObject({
      state: 'released',
      owner: '',
      token: String(released.token),
      pid: null,
    });
    const corrupt = rows.find((row) => row.state === 'corrupt')!;
    expect(corrupt).toMatchObject({
      kind: 'lease',
      id: leaseFiles(dir, 'corrupt-1').safe,
      owner: null,
      token: null,
      expiry: null,
    });
    expect(corrupt.problem).toMatch(/not valid JSON/);

    const leftovers = rows
      .filter((row) => row.state === 'leftover')
      .map((row) => [row.kind, row.path.slice(dir.length + 1)]);
    expect(leftovers).toEqual(
      expect.arrayContaining([
        ['orphan-live', `${r.safe}.5.live`],
        ['temp', `${r.safe}.lease.json.999-0000000a.tmp`],
        ['stray-lock', `${leaseFiles(dir, 'gone').safe}.lock`],
        ['corrupt-copy', `${r.safe}.corrupt-20260101T000000000Z`],
      ]),
    );
    expect(rows.find((row) => row.kind === 'orphan-live')).toMatchObject({
      token: '5',
      locked: false,
      id: 'released-1',
    });
    // --json: every object has the same fields, tokens are strings
    const keys = Object.keys(rows[0]!).sort();
    for (const row of rows) {
      expect(Object.keys(row).sort()).toEqual(keys);
      expect(row.token === null || typeof row.token === 'string').toBe(true);
    }

    // The table for people says the same.
    const human = await cli(['inspect', dir]);
    expect(human.code).toBe(0);
    const line = (id: string): string => human.stdout.split('\n').find((l) => l.startsWith(`${id} `))!;
    expect(line('held-1')).toMatch(
      new RegExp(`^held-1 +held +alice +${held.token} +\\S+Z \\(in \\S+\\) +${holder.pid} +1\\b`),
    );
    expect(line('crashed-1')).toMatch(/ crashed .* holder died: the next acquire takes over$/);
    expect(line('expired-live')).toMatch(new RegExp(` expired .*ago\\) +${process.pid} .*holder still running`));
    expect(line('expired-dead')).toMatch(/ expired +dave +17 +\S+ \(1h00m ago\) +- +0 +takeable$/);
    expect(line('released-1')).toMatch(/ released +- +\d+ /);
    expect(human.stdout).toMatch(/ corrupt .*record is not valid JSON/);
    expect(human.stdout).toMatch(/Leftovers \(4\):/);
    expect(human.stdout).toMatch(/\.5\.live +orphan-live +liveness file of a finished generation; not locked/);
    // Columns line up: every row's STATE starts where the header's does.
    const lines = human.stdout.split('\n');
    const at = lines[0]!.indexOf('STATE');
    for (const l of lines.slice(1, 7)) expect(l.slice(at)).toMatch(/^(held|crashed|expired|released|corrupt) /);
  });

  test('reading changes nothing: no file created, no byte changed, the holder renews and releases as usual', async () => {
    const dir = freshDir();
    const holder = await LeaseAgent.start(dir, 60_000);
    await holder.acquire('s1', 'alice');
    // A record as the Go original writes it: no .lock file beside it, no "session" field.
    const goSafe = leaseFiles(dir, 'go-session').safe;
    fs.writeFileSync(
      join(dir, `${goSafe}.lease.json`),
      '{"owner":"go","token":3,"expiry":"2099-01-02T03:04:05.123456789+01:00"}',
    );
    const before = snapshot(dir);
    const stats = fs.readdirSync(dir).map((name) => [name, fs.statSync(join(dir, name)).mtimeMs]);
    for (let i = 0; i < 3; i++) {
      expect((await cli(['inspect', dir])).code).toBe(0);
      expect((await cli(['inspect', dir, '--json'])).code).toBe(0);
    }
    expect(snapshot(dir)).toEqual(before);
    expect(fs.readdirSync(dir).map((name) => [name, fs.statSync(join(dir, name)).mtimeMs])).toEqual(stats);
    const go = inspectLeaseDir(dir).leases.find((row) => row.safeId === goSafe)!;
    expect(go).toMatchObject({ id: goSafe, state: 'crashed', owner: 'go', token: 3n }); // no session field: the safe name
    expect(go.expiry!.toISOString()).toBe('2099-01-02T02:04:05.123Z');
    expect((await holder.call({ op: 'renew' })).ok).toBe(true);
    expect((await holder.call({ op: 'release' })).ok).toBe(true);
  });

  test('--id shows one lease by its id; an empty or missing directory', async () => {
    const dir = freshDir();
    const lease = new Lease(dir);
    const grant = await lease.acquire('a/b c', 'me');
    await lease.acquire('other', 'me');
    const one = JSON.parse((await cli(['inspect', dir, '--id', 'a/b c', '--json'])).stdout) as JsonRow[];
    expect(one).toHaveLength(1);
    expect(one[0]).toMatchObject({
      id: 'a/b c',
      safeId: leaseFiles(dir, 'a/b c').safe,
      state: 'held',
      pid: process.pid,
      token: String(grant.token),
    });
    const none = await cli(['inspect', dir, '--id', 'never-used']);
    expect(none).toMatchObject({ code: 0, stdout: `No lease for "never-used" in ${dir}.\n` });
    expect(JSON.parse((await cli(['inspect', dir, '--id', 'never-used', '--json'])).stdout)).toEqual([]);
    const empty = freshDir();
    expect(await cli(['inspect', empty])).toMatchObject({ code: 0, stdout: `No leases in ${empty}.\n` });
    const missing = await cli(['inspect', join(empty, 'nope')]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/^flocklease: ENOENT: no such file or directory.*nope/);
    expect(fs.existsSync(join(empty, 'nope'))).toBe(false);
  });

  test('table output escapes control characters and shortens long fields; --json keeps the exact strings', async () => {
    const dir = freshDir();
    const lease = new Lease(dir, { ttlMs: 60_000 });
    const evil = 'evil\u001b]0;pwned\u0007\u001b[31mred\\';
    const split = 'two\nlines\r\t\u0085\u202e';
    const longId = 'x'.repeat(10_000);
    await lease.acquire('evil', evil);
    await lease.acquire('split', split);
    await lease.acquire(longId, 'me');
    const text = await cli(['inspect', dir]);
    expect(text.code).toBe(0);
    // eslint-disable-next-line no-control-regex -- the test looks for control characters on purpose
    expect(text.stdout).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202e]/); // only the newlines between rows
    const lines = text.stdout.trimEnd().split('\n');
    expect(lines).toHaveLength(4); // the header and one row per lease: no row split by a newline
    expect(lines.find((l) => l.startsWith('evil '))).toContain(' evil\\e]0;pwned\\x07\\e[31mred\\\\ ');
    expect(lines.find((l) => l.startsWith('split '))).toContain(' two\\nlines\\r\\t\\x85\\u202e ');
    const long = lines.find((l) => l.startsWith('xxx'))!;
    expect(long.startsWith(`${'x'.repeat(63)}… `)).toBe(true);
    for (const line of lines) expect(line.length, line).toBeLessThan(200);

    const json = JSON.parse((await cli(['inspect', dir, '--json'])).stdout) as JsonRow[];
    expect(json.map((row) => [row.id, row.owner]).sort()).toEqual(
      [
        ['evil', evil],
        ['split', split],
        [longId, 'me'],
      ].sort(),
    );
  });
});
