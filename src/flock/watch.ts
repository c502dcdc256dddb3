/**
 * Waiting for a lock to be let go, shared per file: one addon watch per watched `.live`, `.wait` or
 * `.lock` file however many waiters want it (a watch cannot be cancelled and ends when that lock
 * ends, so sharing bounds them). Past MAX_WATCHES watched files, waiters poll instead.
 */
import { timerDelay } from '../kernel/timers.js';
import type { LeaseIO } from './io.js';

const MAX_WATCHES = 64;
const POLL_MS = 10;
/** Each watched file's one addon watch, and the callbacks of everyone waiting on it. */
const watches = new Map<string, Set<() => void>>();

/** One wait of a caller; `over` once it stopped waiting (ends a polling fallback). A plain flag,
 * not an AbortSignal: a waiting acquire makes one per round, and an AbortController's abort (its
 * event dispatch and AbortError) took ~7 % of a contending process's busy time in a profile. */
export interface WaitRound {
  over: boolean;
}

/**
 * Waits until nobody holds `path` exclusively (no path: that part never comes), `ms` pass, a
 * function in `wakers` is called (it removes itself), or `signal` aborts (which rejects with its
 * reason). One plain timer per wait.
 *
 * Not an async function over Promise.race: on a hand-off this is the first thing the woken waiter
 * runs, cold, and every promise hop and teardown step on the way to its grant showed (see
 * docs/bench.md, "The seventh round" and "The eighth round"). The watch's report settles the wait
 * directly, and what only tidies up (the timer, the abort listener, the shared watch's entry) runs
 * after the woken code, on setImmediate.
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
    const tidy = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', settle);
      if (path !== undefined) watches.get(path)?.delete(settle);
    };
    const settle = (): void => {
      if (round.over) return;
      round.over = true;
      wakers?.delete(settle); // now: the waiting acquire drops the id's set once it is empty
      if (signal?.aborted) reject(signal.reason);
      else resolve();
      setImmediate(tidy);
    };
    // First, so that if it throws (rejecting this promise) nothing is left set up.
    if (path !== undefined && !whenUnlocked(io, path, round, settle)) {
      resolve();
      return;
    }
    const timer = setTimeout(settle, timerDelay(ms));
    signal?.addEventListener('abort', settle, { once: true });
    wakers?.add(settle);
  });
}

/**
 * Calls `unlocked` once nobody holds `path` exclusively (released, or its holder died), from the
 * watch's report itself, with no promise in between; `false` (and no call) if it does not exist or
 * nobody holds it now. `round` only stops a polling fallback.
 */
export function whenUnlocked(io: LeaseIO, path: string, round: WaitRound, unlocked: () => void): boolean {
  const shared = watches.get(path);
  if (shared !== undefined) {
    shared.add(unlocked);
    return true;
  }
  if (watches.size >= MAX_WATCHES) {
    void pollUnlocked(io, path, round).then(unlocked);
    return true;
  }
  const waiting = new Set([unlocked]);
  const started = io.watchUnlock(path, () => {
    watches.delete(path);
    for (const callback of waiting) callback();
  });
  if (started) watches.set(path, waiting);
  return started;
}

/** Never rejects: an error or the round's end just ends the wait (the caller re-checks the lease). */
async function pollUnlocked(io: LeaseIO, path: string, round: WaitRound): Promise<void> {
  try {
    while (!round.over && io.probeLive(path)) await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  } catch {
    // the file became unreadable: time to look again
  }
}
