// Mutations work one id at a time, under its transition lock.

import fs from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { LeaseTimeoutError } from '../../port/errors.js';
import type { LeaseIO } from '../io.js';
import { lockName } from '../layout.js';

/** Takes `path`'s transition flock, waiting (bounded) while another operation holds it. */
async function lockTransition(io: LeaseIO, path: string, id: string, timeoutMs: number): Promise<number> {
  const deadline = performance.now() + timeoutMs;
  for (let delay = 1; ; ) {
    const fd = io.tryLockTransition(path);
    if (typeof fd === 'number') return fd;
    if (fd === 'replaced') continue; // unlinked (pruned) while we locked it: lock the new one
    const left = deadline - performance.now();
    if (left <= 0) {
      throw new LeaseTimeoutError(
        `the transition lock ${path} was not free within ${timeoutMs} ms: another process is in (or stopped in) an operation on this id`,
        id,
      );
    }
    await sleep(Math.min(delay, left));
    delay = Math.min(delay * 2, 50);
  }
}

/**
 * Files this process creates belong to the lease directory's owner: an operator running as root
 * must not leave a record or lock file the service (a less privileged user) can no longer open.
 */
export function giveToDirOwner(dir: string, paths: readonly string[]): void {
  if (process.getuid?.() !== 0) return;
  const owner = fs.statSync(dir);
  for (const path of paths) {
    try {
      const st = fs.lstatSync(path);
      if (st.uid !== owner.uid || st.gid !== owner.gid) fs.lchownSync(path, owner.uid, owner.gid);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
  }
}

/** Runs `body` under the transition lock of `id`'s lease (creating the lock file if needed). */
export async function underLock<T>(io: LeaseIO, dir: string, safe: string, id: string, timeoutMs: number, body: (lockFd: number) => Promise<T>): Promise<T> {
  const lock = join(dir, lockName(safe));
  const fd = await lockTransition(io, lock, id, timeoutMs);
  try {
    giveToDirOwner(dir, [lock]);
    return await body(fd);
  } finally {
    io.unlockTransition(fd);
  }
}
