import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';

/** Where the lease tests run: a real disk directory, and tmpfs where the machine has one. */
export const filesystems: Array<[string, string]> = [['disk', tmpdir()]];
if (process.platform === 'linux') filesystems.push(['tmpfs', '/dev/shm']);

const made: string[] = [];
afterAll(() => {
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A fresh directory under `root`, removed after the file's tests. */
export function freshDir(root: string = tmpdir()): string {
  const dir = mkdtempSync(join(root, 'flocklease-test-'));
  made.push(dir);
  return dir;
}
