/**
 * Creating a lease directory and its missing parents, in a bounded walk.
 *
 * Not `fs.mkdirSync(dir, { recursive: true })`: on a file system that refuses to create a
 * directory with ENOENT although its parent exists (procfs, sysfs), Node's recursive mkdir loops
 * forever at 100 % CPU, and since it is synchronous nothing (not even SIGTERM) gets through.
 * Here each missing level is tried at most twice (once on the way up, once on the way down), and
 * the first refusal is thrown as it is: Node's own error (`ENOENT`, `EACCES`, `EROFS`, `ENOTDIR`...)
 * with `syscall: 'mkdir'` and the path of the directory that could not be created.
 *
 * Modes: the parents this creates get 0777 less the umask, as `mkdir -p` gives them; only the lease
 * directory itself is created 0700 (less the umask). A directory that already exists is left as it
 * is: its mode is the owner's choice, and this never chmods what it did not create.
 */
import fs from 'node:fs';
import { dirname, resolve } from 'node:path';

const LEASE_DIR_MODE = 0o700;
const PARENT_MODE = 0o777;

/** Creates `dir` (0700) and its missing parents (umask); fails if `dir` is not a directory. */
export function makeLeaseDir(dir: string): void {
  const target = resolve(dir);
  // Up: find the deepest level that exists (mkdir says EEXIST) or cannot be made for another reason.
  const missing: string[] = [];
  for (let path = target; ;) {
    const outcome = tryMkdir(path, path === target ? LEASE_DIR_MODE : PARENT_MODE);
    if (outcome === 'created') break;
    if (outcome === 'exists') {
      if (path === target) return checkIsDirectory(target);
      break; // an existing parent (if it is not a directory, the next mkdir says ENOTDIR)
    }
    const parent = dirname(path);
    if (parent === path) throw outcome; // the root itself is missing: nothing to walk up to
    missing.push(path);
    path = parent;
  }
  // Down: each missing level once more, now that its parent exists. A refusal here is final.
  for (const path of missing.reverse()) {
    const outcome = tryMkdir(path, path === target ? LEASE_DIR_MODE : PARENT_MODE);
    if (outcome instanceof Error) throw outcome;
    if (outcome === 'exists' && path === target) checkIsDirectory(target); // made by a racing process
  }
}

/** mkdir(2) once: `'created'`, `'exists'`, an ENOENT error to walk up from; anything else throws. */
function tryMkdir(path: string, mode: number): 'created' | 'exists' | NodeJS.ErrnoException {
  try {
    fs.mkdirSync(path, { mode });
    return 'created';
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') return 'exists';
    if (code === 'ENOENT') return error as NodeJS.ErrnoException;
    throw error;
  }
}

function checkIsDirectory(dir: string): void {
  if (fs.statSync(dir).isDirectory()) return; // a symlink to a directory is one
  throw Object.assign(new Error(`ENOTDIR: the lease directory is not a directory, '${dir}'`), {
    code: 'ENOTDIR',
    syscall: 'mkdir',
    path: dir,
  });
}
