/**
 * Waiting for a lock to be let go, shared per file: one addon watch per watched `.live`, `.wait` or
 * `.lock` file however many waiters want it (a watch cannot be cancelled and ends when that lock
 * ends, so sharing bounds them). Past MAX_WATCHES watched files, waiters poll instead.
 */
import { clearAlarm, setAlarm } from './alarm.js';
import type { LeaseIO, UnlockReport, WatchMode } from './io.js';

const MAX_WATCHES = 64;
const POLL_MS = 10;
/** Each watched file's one addon watch, and the callbacks of everyone waiting on it. */
const watches = new Map<string, Set<Unlocked>>();

/** One wait of a caller; `over` once it stopped waiting (ends a polling fallback). A plain flag,
 * not an AbortSignal: a waiting acquire makes one per round, and an AbortController's abort (its
 * event dispatch and AbortError) is costly at that rate. */
export interface WaitRound {
  over: boolean;
}

/**
 * Waits until nobody holds `path` exclusively (no path: that part never comes), `ms` pass, a
 * function in `wakers` is called (it removes itself), or `signal` aborts (which rejects with its
 * reason). One alarm per wait (see alarm.ts). `mode`: see WatchMode (for 'cue', the caller's `ms`
 * is its next look).
 *
 * Not an async function over Promise.race: on a hand-off this is the first thing the woken waiter
 * runs, cold, and every promise hop and teardown step on its way to the grant costs it. The
 * watch's report settles the wait directly, and what only tidies up (the alarm, the abort listener,
 * the shared watch's entry) runs after the woken code: on setImmediate, or after a report's
 * microtasks (the watch's drain).
 */
export function waitForUnlock(
  io: LeaseIO,
  path: string | undefined,
  ms: number,
  signal: AbortSignal | undefined,
  wakers?: Set<() => void>,
  mode?: WatchMode,
): Promise<void> {
  if (signal?.aborted) return Promise.reject(signal.reason);
  return new Promise<void>((resolve, reject) => {
    const round: WaitRound = { over: false };
    const tidy = (): void => {
      clearAlarm(alarm);
      signal?.removeEventListener('abort', settle);
      if (path !== undefined) watches.get(path)?.delete(reported);
    };
    const end = (): void => {
      round.over = true;
      wakers?.delete(settle); // now: the waiting acquire drops the id's set once it is empty
      if (signal?.aborted) reject(signal.reason);
      else resolve();
    };
    const settle = (): void => {
      if (round.over) return;
      end();
      setImmediate(tidy);
    };
    // The watch runs the tidy-up it returns once the report's microtasks have run: not even
    // scheduling it is on the woken waiter's path to its grant.
    const reported = (): (() => void) | undefined => {
      if (round.over) return undefined;
      end();
      return tidy;
    };
    // First, so that if it throws (rejecting this promise) nothing is left set up.
    if (path !== undefined && !whenUnlocked(io, path, round, reported, mode)) {
      resolve();
      return;
    }
    const alarm = setAlarm(ms, settle);
    signal?.addEventListener('abort', settle, { once: true });
    wakers?.add(settle);
  });
}

/** Called once a watched lock is let go. May return what to run once the report is done. */
type Unlocked = () => (() => void) | undefined | void;

/**
 * Calls `unlocked` once nobody holds `path` exclusively (released, or its holder died), from the
 * watch's report itself, with no promise in between; `false` (and no call) if it does not exist or
 * nobody holds it now. `round` only stops a polling fallback. A `mode` (see LeaseIO.watchUnlock) is
 * asked only by a watch this call starts: a shared watch already has its own (every watch of a
 * file kind has the same mode: see WatchMode).
 */
export function whenUnlocked(
  io: LeaseIO,
  path: string,
  round: WaitRound,
  unlocked: Unlocked,
  mode?: WatchMode,
): boolean {
  const shared = watches.get(path);
  if (shared !== undefined) {
    shared.add(unlocked);
    return true;
  }
  if (watches.size >= MAX_WATCHES) {
    void pollUnlocked(io, path, round).then(() => unlocked()?.());
    return true;
  }
  const waiting = new Set<Unlocked>().add(unlocked); // not from an array: no array and no iterator per watch
  const report: UnlockReport = () => {
    watches.delete(path);
    if (waiting.size === 1 && waiting.has(unlocked)) return unlocked(); // the usual case: no iterator
    let later: (() => void) | undefined;
    for (const callback of waiting) {
      const after = callback();
      if (typeof after !== 'function') continue;
      const before = later;
      later = before === undefined ? after : () => (before(), after());
    }
    return later;
  };
  const started = io.watchUnlock(path, report, mode);
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
