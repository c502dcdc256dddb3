/**
 * Waiting for a lock to be let go, shared per file: one watcher thread per watched `.live` or
 * `.wait` file however many waiters want it (the thread cannot be cancelled and ends when that
 * lock ends, so sharing bounds them). Past MAX_THREADS watched files, waiters poll instead.
 */
import { sleep } from '../port/abort.js';
import type { LeaseIO } from './io.js';

const MAX_THREADS = 64;
const POLL_MS = 10;
const watches = new Map<string, Promise<void>>();

/**
 * Resolves once nobody holds `path` exclusively (released, or its holder died), or at once if it
 * does not exist. `signal` only stops a polling fallback; a thread's result is simply not awaited.
 */
export function whenUnlocked(io: LeaseIO, path: string, signal: AbortSignal): Promise<void> {
  const shared = watches.get(path);
  if (shared !== undefined) return shared;
  if (watches.size >= MAX_THREADS) return pollUnlocked(io, path, signal);
  let started = false;
  const watch = new Promise<void>((resolve) => {
    started = io.watchUnlock(path, () => {
      watches.delete(path);
      resolve();
    });
    if (!started) resolve();
  });
  if (started) watches.set(path, watch);
  return watch;
}

/** Never rejects: an error or an abort just ends the wait (the caller re-checks the lease). */
async function pollUnlocked(io: LeaseIO, path: string, signal: AbortSignal): Promise<void> {
  try {
    while (!signal.aborted && io.probeLive(path)) await sleep(POLL_MS, signal);
  } catch {
    // aborted, or the file became unreadable: either way, time to look again
  }
}
