import { mkdirSync, mkdtempSync, rmSync, statfsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll } from 'vitest';

const TMPFS_MAGIC = 0x01021994;

/** A directory on a disk file system: the system temp dir, unless that is tmpfs (then one
 * inside the checkout, which is on disk). */
export function diskRoot(): string {
  if (statfsSync(tmpdir()).type !== TMPFS_MAGIC) return tmpdir();
  const root = fileURLToPath(new URL('../../.test-tmp', import.meta.url));
  mkdirSync(root, { recursive: true });
  return root;
}

/** Where the lease tests run: a real disk directory, and tmpfs where the machine has one. */
export const filesystems: Array<[string, string]> = [['disk', diskRoot()]];
if (process.platform === 'linux') filesystems.push(['tmpfs', '/dev/shm']);

const made: string[] = [];
afterAll(() => {
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A fresh directory under `root`, removed after the file's tests. */
export function freshDir(root: string = diskRoot()): string {
  const dir = mkdtempSync(join(root, 'flocklease-test-'));
  made.push(dir);
  return dir;
}
