// `flocklease repair` restores service after a corrupt record (keeping a copy); `flocklease
// release --force` breaks a lease so its holder's next renew reports the loss.
import fs from 'node:fs';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { Lease } from '../../src/flock/lease.js';
import { inspectLeaseDir } from '../../src/flock/operator/index.js';
import { LeaseCorruptError } from '../../src/port/errors.js';
import { LeaseAgent } from '../helpers/agent.js';
import { freshDir } from '../helpers/dirs.js';
import { leaseFiles, readRecordFile, snapshot, writeRecordFile } from '../helpers/lease-files.js';
import { cli } from './cli.js';

const NOBODY = 65534;

describe('flocklease repair', () => {
  test('replaces a corrupt record with a tombstone beating every visible token, keeps the copy, and service resumes', async () => {
    const dir = freshDir();
    const f = leaseFiles(dir, 'job');
    const bad = '{"owner":"alice","token":18446744073709000000,"expiry":"2026-';
    fs.writeFileSync(f.record, bad, { mode: 0o600 });
    fs.writeFileSync(f.live(1795000000000000n), ''); // a generation whose record got damaged
    const lease = new Lease(dir);
    await expect(lease.acquire('job', 'bob')).rejects.toBeInstanceOf(LeaseCorruptError);
    expect((await cli(['run', '--dir', dir, '--id', 'job', '--', 'true'])).code).toBe(65); // so does run

    const result = await cli(['repair', dir, '--id', 'job']);
    expect(result.code).toBe(0);
    const copyName = /kept the corrupt record as (\S+)/.exec(result.stdout)![1]!;
    expect(copyName).toMatch(new RegExp(`^${f.safe}\\.corrupt-\\d{8}T\\d{9}Z$`));
    expect(fs.readFileSync(join(dir, copyName), 'utf8')).toBe(bad);
    expect(result.stdout).toMatch(/^repaired "job": record is not valid JSON/);
    const tombstone = readRecordFile(dir, 'job');
    // The damaged record still showed its token: the tombstone's follows it (the takeover rule).
    expect(tombstone).toMatchObject({ owner: '', token: 18446744073709000001n, session: 'job' });
    expect(fs.existsSync(f.live(1795000000000000n))).toBe(false);

    const grant = await lease.acquire('job', 'bob');
    expect(grant.token).toBe(18446744073709000002n);
    // inspect lists the copy as a leftover; prune leaves it.
    const rows = inspectLeaseDir(dir);
    expect(rows.leftovers).toEqual([
      expect.objectContaining({ kind: 'corrupt-copy', id: 'job', path: join(dir, copyName) }),
    ]);
    await cli(['prune', dir, '--older-than', '0']);
    expect(fs.existsSync(join(dir, copyName))).toBe(true);
  });

  test('a symlinked record: run exits 65 with the repair hint a corrupt record gets; repair fixes it', async () => {
    const dir = freshDir();
    const f = leaseFiles(dir, 'job');
    fs.writeFileSync(join(dir, 'elsewhere'), '{}');
    fs.symlinkSync(join(dir, 'elsewhere'), f.record);
    const run = await cli(['run', '--dir', dir, '--id', 'job', '--', 'true']);
    expect(run.code).toBe(65);
    expect(run.stderr).toBe(
      `flocklease: ${f.record} is a symbolic link; lease files are never followed (see \`flocklease repair\`)\n`,
    );
    expect((await cli(['repair', dir, '--id', 'job'])).code).toBe(0);
    expect((await cli(['run', '--dir', dir, '--id', 'job', '--', 'true'])).code).toBe(0);
  });

  test('without a salvageable token the tombstone takes the largest .live token + 1 or the clock, whichever is greater', async () => {
    const dir = freshDir();
    const f = leaseFiles(dir, 'job');
    fs.writeFileSync(f.record, Buffer.from([0xff, 0xfe, 0x00]));
    const future = BigInt(Date.now() + 3_600_000) * 1000n;
    fs.writeFileSync(f.live(future), '');
    expect((await cli(['repair', dir, '--id', 'job'])).code).toBe(0);
    expect(readRecordFile(dir, 'job').token).toBe(future + 1n);
    const other = leaseFiles(dir, 'other');
    fs.writeFileSync(other.record, 'null');
    const before = BigInt(Date.now()) * 1000n;
    expect((await cli(['repair', dir, '--id', 'other'])).code).toBe(0);
    expect(readRecordFile(dir, 'other').token).toBeGreaterThanOrEqual(before);
  });

  test('a symlink or a directory at the record path is set aside as it is (the target untouched)', async () => {
    const dir = freshDir();
    const target = join(freshDir(), 'precious');
    fs.writeFileSync(target, 'do not touch');
    const link = leaseFiles(dir, 'linked');
    fs.symlinkSync(target, link.record);
    const res = await cli(['repair', dir, '--id', 'linked']);
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(/symbolic link/);
    const copy = join(dir, /kept the corrupt record as (\S+)/.exec(res.stdout)![1]!);
    expect(fs.readlinkSync(copy)).toBe(target);
    expect(fs.readFileSync(target, 'utf8')).toBe('do not touch');
    expect(fs.lstatSync(link.record).isFile()).toBe(true);

    const folder = leaseFiles(dir, 'folder');
    fs.mkdirSync(folder.record);
    fs.writeFileSync(join(folder.record, 'inside'), 'x');
    expect((await cli(['repair', dir, '--id', 'folder'])).code).toBe(0);
    expect(readRecordFile(dir, 'folder').owner).toBe('');
    await new Lease(dir).acquire('folder', 'me');
  });

  test('a healthy or missing record is left alone (exit 0); files it writes belong to the directory owner', async () => {
    const dir = freshDir();
    const lease = new Lease(dir);
    await lease.acquire('fine', 'me');
    const before = snapshot(dir);
    const healthy = await cli(['repair', dir, '--id', 'fine']);
    expect(healthy).toMatchObject({ code: 0, stdout: '"fine": the record is not corrupt; nothing to repair\n' });
    const missing = await cli(['repair', dir, '--id', 'never']);
    expect(missing).toMatchObject({ code: 0, stdout: '"never": no record; nothing to repair\n' });
    expect(fs.readdirSync(dir).filter((n) => !n.startsWith(leaseFiles(dir, 'never').safe))).toEqual(
      Object.keys(before),
    );

    // As root, for a directory owned by a service user: the tombstone and the lock file are theirs.
    const owned = freshDir();
    if (process.getuid?.() === 0) fs.chownSync(owned, NOBODY, NOBODY);
    const owner = fs.statSync(owned).uid;
    fs.writeFileSync(leaseFiles(owned, 'job').record, 'garbage');
    if (process.getuid?.() === 0) fs.chownSync(leaseFiles(owned, 'job').record, NOBODY, NOBODY);
    expect((await cli(['repair', owned, '--id', 'job'])).code).toBe(0);
    for (const name of fs.readdirSync(owned))
      expect([name, fs.lstatSync(join(owned, name)).uid]).toEqual([name, owner]);
  });

  test('usage: --id is required; a missing directory is an error, not created', async () => {
    const dir = freshDir();
    const noId = await cli(['repair', dir]);
    expect(noId.code).toBe(64);
    expect(noId.stderr).toMatch(/^flocklease: required option '--id <id>' not specified/);
    const missing = await cli(['repair', join(dir, 'nope'), '--id', 'x']);
    expect(missing.code).toBe(1);
    expect(fs.existsSync(join(dir, 'nope'))).toBe(false);
  });
});

describe('flocklease release --force', () => {
  test('breaks a held lease: a tombstone with a greater token; the holder loses it at its next renew', async () => {
    const dir = freshDir();
    const holder = await LeaseAgent.start(dir, 60_000);
    const held = await holder.acquire('job', 'alice');
    const result = await cli(['release', dir, '--id', 'job', '--force']);
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(
      new RegExp(
        `^broke "job": it was held by alice \\(pid ${holder.pid}, token ${held.token}, expires \\S+Z, in \\S+\\)$`,
        'm',
      ),
    );
    const tombstone = readRecordFile(dir, 'job');
    expect(tombstone.owner).toBe('');
    expect(tombstone.token).toBeGreaterThan(BigInt(held.token));
    expect(result.stdout).toContain(`tombstone token ${tombstone.token}: the holder loses the lease at its next renew`);
    expect(fs.existsSync(leaseFiles(dir, 'job').live(BigInt(held.token)))).toBe(false);
    const renew = await holder.call({ op: 'renew' });
    expect(renew).toMatchObject({ ok: false, code: 'ELEASEHELD' });
    const next = await new Lease(dir).acquire('job', 'bob');
    expect(next.token).toBeGreaterThan(tombstone.token);
    // The old holder's descriptor is gone too once it saw the loss: nobody holds its old generation.
    expect(inspectLeaseDir(dir, { id: 'job' }).leases[0]).toMatchObject({
      state: 'held',
      owner: 'bob',
      pid: process.pid,
    });
  });

  test('without --force: a usage error that changes nothing', async () => {
    const dir = freshDir();
    const holder = await LeaseAgent.start(dir, 60_000);
    await holder.acquire('job', 'alice');
    const before = snapshot(dir);
    const result = await cli(['release', dir, '--id', 'job']);
    expect(result.code).toBe(64);
    expect(result.stderr).toMatch(
      /^flocklease: release needs --force: it breaks a lease that another process may be using/,
    );
    expect(result.stderr).toContain(`flocklease inspect ${dir} --id job`);
    expect(snapshot(dir)).toEqual(before);
  });

  test('a crashed lease, an already released one, a missing one, a corrupt one (exit 65)', async () => {
    const dir = freshDir();
    writeRecordFile(dir, 'crashed', { owner: 'bob', token: 5n, expiryMs: Date.now() + 60_000, session: 'crashed' });
    const crashed = await cli(['release', dir, '--id', 'crashed', '--force']);
    expect(crashed.stdout).toMatch(/^broke "crashed": it was recorded \(holder dead\) for bob \(token 5, /);
    expect(crashed.stdout).toMatch(/the next acquire takes over\n$/);
    const token = readRecordFile(dir, 'crashed').token;
    const again = await cli(['release', dir, '--id', 'crashed', '--force']);
    expect(again).toMatchObject({ code: 0, stdout: `"crashed": already released (token ${token}); nothing to do\n` });
    expect(await cli(['release', dir, '--id', 'nope', '--force'])).toMatchObject({
      code: 0,
      stdout: '"nope": no record; nothing to release\n',
    });
    fs.writeFileSync(leaseFiles(dir, 'bad').record, '{');
    const corrupt = await cli(['release', dir, '--id', 'bad', '--force']);
    expect(corrupt.code).toBe(65);
    expect(corrupt.stderr).toMatch(/^flocklease: .*record is not valid JSON.*see `flocklease repair`/);
  });
});
