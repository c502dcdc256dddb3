/**
 * Waiting for a lock to be let go, shared per file: one addon watch per watched `.live`, `.wait` or
 * `.lock` file however many waiters want it (a watch cannot be cancelled and ends when that lock
 * ends, so sharing bounds them). Past MAX_WATCHES watched files, waiters poll instead.
 */
import { timerDelay } from '../kernel/timers.js';
import type { LeaseIO } from './io.js';

const MAX_WATCHES = 64;
const POLL_MS = 10;
const watches = new Map<string, Promise<void>>();

/** One wait of a caller; `over` once it stopped waiting (ends a polling fallback). A plain flag,
 * not an AbortSignal: a waiting acquire makes one per round, and an AbortController's abort (its
 * event dispatch and AbortError) took ~7 % of a contending process's busy time in a profile. */
export interface WaitRound {
  over: boolean;
}

/**
 * Waits until nobody holds `path` exclusively (no path: that part never comes), `ms` pass, a
 * function in `wakers` is called (it adds and removes its own), or `signal` aborts (which rejects
 * with its reason). One plain timer per wait.
 *
 * Not an async function over Promise.race: on a hand-off this is the first thing the woken waiter
 * runs, cold, and every promise hop and teardown step on the way to its grant showed (see
 * docs/bench.md, "The seventh round"). The watch settles the wait directly, and the wait's
 * teardown runs right there.
 */
export function waitForUnlock(
  io: LeaseIO,
  path: string | undefined,
  ms: number,
  signal: AbortSignal | undefined,
  wakers?: Set<() => void>,
): Promise<void> {
  if (signal?.aborted) return Promise.reject(signal.reason);
  return new Promise<void>((resolve, reject) => {
    const round: WaitRound = { over: false };
    // First, so that if it throws (rejecting this promise) nothing is left set up.
    const unlocked = path === undefined ? undefined : whenUnlocked(io, path, round);
    const settle = (): void => {
      if (round.over) return;
      round.over = true;
      clearTimeout(timer);
      signal?.removeEventListener('abort', settle);
      wakers?.delete(settle);
      if (signal?.aborted) reject(signal.reason);
      else resolve();
    };
    const timer = setTimeout(settle, timerDelay(ms));
    signal?.addEventListener('abort', settle, { once: true });
    wakers?.add(settle);
    void unlocked?.then(settle);
  });
}

/**
 * Resolves once nobody holds `path` exclusively (released, or its holder died), or at once if it
 * does not exist or nobody holds it. `round` only stops a polling fallback; an addon watch's
 * result is simply not awaited.
 */
export function whenUnlocked(io: LeaseIO, path: string, round: WaitRound): Promise<void> {
  const shared = watches.get(path);
  if (shared !== undefined) return shared;
  if (watches.size >= MAX_WATCHES) return pollUnlocked(io, path, round);
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

/** Never rejects: an error or the round's end just ends the wait (the caller re-checks the lease). */
async function pollUnlocked(io: LeaseIO, path: string, round: WaitRound): Promise<void> {
  try {
    while (!round.over && io.probeLive(path)) await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  } catch {
    // the file became unreadable: time to look again
  }
}
