// Creating the lease directory (issue 9, item 1): a directory that cannot be created fails at
// once with a typed error naming it (never the endless loop of Node's recursive mkdir on procfs),
// parents get the umask's mode, only the lease directory itself is 0700, and an existing directory
// keeps its mode.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, test } from 'vitest';
import { Lease } from '../src/flock/lease.js';
import { cli } from './cli/cli.js';
import { freshDir } from './helpers/dirs.js';

const DIST_INDEX = fileURLToPath(new URL('../dist/index.js', import.meta.url));

/** Acquires a lease in `dir` in a child process (a hang there must not hang this worker): its
 * error as JSON, or a timeout. */
function acquireInChild(dir: string): { code: string; syscall: string; path: string; message: string; ms: number } {
  const script = `
    import { Lease } from ${JSON.stringify(DIST_INDEX)};
    const started = performance.now();
    try {
      await new Lease(process.argv[1]).acquire('job', 'me');
      console.log(JSON.stringify({ code: 'none' }));
    } catch (e) {
      console.log(JSON.stringify({ code: e.code, syscall: e.syscall, path: e.path, message: e.message, ms: performance.now() - started }));
    }`;
  const child = spawnSync(process.execPath, ['--input-type=module', '-e', script, dir], {
    encoding: 'utf8',
    timeout: 10_000,
    killSignal: 'SIGKILL',
  });
  if (child.error !== undefined || child.signal !== null)
    throw new Error(`the acquire did not end within 10 s (${child.signal ?? child.error?.message})`);
  return JSON.parse(child.stdout) as never;
}

describe('the lease directory', () => {
  test.runIf(fs.existsSync('/proc/self'))('on procfs: ENOENT naming the directory at once, not a hang', () => {
    const result = acquireInChild('/proc/flocklease-x');
    expect(result).toMatchObject({ code: 'ENOENT', syscall: 'mkdir', path: '/proc/flocklease-x' });
    expect(result.message).toContain("'/proc/flocklease-x'");
    const nested = acquireInChild('/proc/flocklease-x/y/z');
    expect(nested).toMatchObject({ code: 'ENOENT', syscall: 'mkdir', path: '/proc/flocklease-x' });
  });

  test.runIf(fs.existsSync('/proc/self'))(
    'flocklease run --dir /proc/x exits promptly with a message naming the path',
    async () => {
      const result = await Promise.race([
        cli(['run', '--dir', '/proc/flocklease-x', '--id', 'job', '--ttl', '10s', '--', 'true']),
        new Promise<never>((_, reject) =>
          setTimeout(() => reject(new Error('run did not exit within 15 s')), 15_000).unref(),
        ),
      ]);
      expect(result.code).toBe(1);
      expect(result.stderr).toMatch(/^flocklease: ENOENT: .*mkdir '\/proc\/flocklease-x'/);
    },
  );

  test('a file in place of a parent: ENOTDIR naming the path; nothing is created', async () => {
    const root = freshDir();
    fs.writeFileSync(join(root, 'file'), '');
    const error = await new Lease(join(root, 'file', 'sub', 'leases')).acquire('job', 'me').catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'ENOTDIR', syscall: 'mkdir', path: join(root, 'file', 'sub', 'leases') });
    expect(fs.readdirSync(root)).toEqual(['file']);
    const onFile = await new Lease(join(root, 'file')).acquire('job', 'me').catch((e: unknown) => e);
    expect(onFile).toMatchObject({ code: 'ENOTDIR', path: join(root, 'file') });
  });

  describe('on a read-only mount', () => {
    const mountPoint = freshDir();
    const mounted = spawnSync('mount', ['-t', 'tmpfs', '-o', 'ro,size=64k', 'tmpfs', mountPoint]).status === 0;
    afterAll(() => {
      if (mounted) spawnSync('umount', [mountPoint]);
    });
    // Root ignores permission bits, so a read-only file system is the refusal a root test can see.
    test.runIf(mounted)('EROFS naming the directory', async () => {
      const dir = join(mountPoint, 'a', 'leases');
      const error = await new Lease(dir).acquire('job', 'me').catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'EROFS', syscall: 'mkdir', path: join(mountPoint, 'a') });
      const cliResult = await cli(['run', '--dir', dir, '--id', 'job', '--ttl', '10s', '--', 'true']);
      expect(cliResult.code).toBe(1);
      expect(cliResult.stderr).toContain(`EROFS: read-only file system, mkdir '${join(mountPoint, 'a')}'`);
    });
  });

  test('parents get the umask mode, the lease directory 0700; an existing directory keeps its mode', async () => {
    const root = freshDir();
    const old = process.umask(0o022);
    try {
      const dir = join(root, 'run', 'myapp', 'leases');
      const lease = new Lease(dir);
      await lease.release(await lease.acquire('job', 'me'));
      const mode = (path: string): number => fs.statSync(path).mode & 0o777;
      expect([mode(join(root, 'run')), mode(join(root, 'run', 'myapp')), mode(dir)]).toEqual([0o755, 0o755, 0o700]);

      const existing = join(root, 'shared');
      fs.mkdirSync(existing, { mode: 0o775 });
      fs.chmodSync(existing, 0o775);
      const grant = await new Lease(existing).acquire('job', 'me');
      expect(grant.token).toBeGreaterThan(0n);
      expect(mode(existing)).toBe(0o775);
    } finally {
      process.umask(old);
    }
  });
});
