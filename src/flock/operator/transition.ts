// Mutations work one id at a time, under its transition lock.

import fs from 'node:fs';
import { join } from 'node:path';
import type { LeaseIO } from '../io.js';
import { lockName } from '../layout.js';
import { lockTransition } from '../transition.js';

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
export async function underLock<T>(
  io: LeaseIO,
  dir: string,
  safe: string,
  id: string,
  timeoutMs: number,
  body: (lockFd: number) => T | Promise<T>,
): Promise<T> {
  const lock = join(dir, lockName(safe));
  // The Lease's own transition lock: the same wait in the kernel, the same LeaseTimeoutError.
  const fd = await lockTransition({
    io,
    path: lock,
    sessionId: id,
    deadline: performance.now() + timeoutMs,
    timeoutMs,
  });
  try {
    giveToDirOwner(dir, [lock]);
    return await body(fd);
  } finally {
    io.unlockTransition(fd);
  }
}
