/**
 * Waiting for a lock to be let go, shared per file: one addon watch per watched `.live`, `.wait` or
 * `.lock` file however many waiters want it (a watch cannot be cancelled and ends when that lock
 * ends, so sharing bounds them). Past MAX_WATCHES watched files, waiters poll instead.
 */
import { clearAlarm, setAlarm } from './alarm.js';
import type { HandOffProbe, LeaseIO, UnlockReport, WatchMode } from './io.js';

const MAX_WATCHES = 64;
const POLL_MS = 10;
/** Each watched file's one addon watch, and the callbacks of everyone waiting on it. */
const watches = new Map<string, Set<Unlocked>>();

/** One wait of a caller; `over` once it stopped waiting (ends a polling fallback). A plain flag,
 * not an AbortSignal: a waiting acquire makes one per round, and an AbortController's abort (its
 * event dispatch and AbortError) took ~7 % of a contending process's busy time in a profile. */
export interface WaitRound {
  over: boolean;
}

/** What a waiting acquire's wait does with a hand-off its watch found (see HandOffProbe). */
export interface HandOffWatch<T> {
  readonly probe: HandOffProbe;
  /** Called from the watch's report, synchronously, with the record's token and expiry text: the
   * grant if the hand-off was taken (the wait then resolves with it), else `undefined` (the caller
   * looks again under the lock). */
  take(token: bigint, expiry: string): T | undefined;
}

/** What a wait with a `handOff` resolves with when its watch's report carried no hand-off: the
 * probe read the record as the lock went, so a look without the lock would read it again for
 * nothing (the locked path decides). */
export const NO_HAND_OFF: unique symbol = Symbol('flocklease.noHandOff');

/**
 * Waits until nobody holds `path` exclusively (no path: that part never comes), `ms` pass, a
 * function in `wakers` is called (it removes itself), or `signal` aborts (which rejects with its
 * reason). One alarm per wait (see alarm.ts). Resolves with what `handOff.take` returned when the
 * watch found a hand-off, NO_HAND_OFF when its probe found none, else `undefined`. `mode`: see
 * WatchMode (for 'cue', the caller's `ms` is its next look).
 *
 * Not an async function over Promise.race: on a hand-off this is the first thing the woken waiter
 * runs, cold, and every promise hop and teardown step on the way to its grant showed (see
 * docs/bench.md, "The seventh round" to "The tenth round"). The watch's report settles the wait
 * directly, and what only tidies up (the alarm, the abort listener, the shared watch's entry) runs
 * after the woken code: on setImmediate, or after a report's microtasks (the watch's drain).
 */
export function waitForUnlock<T = never>(
  io: LeaseIO,
  path: string | undefined,
  ms: number,
  signal: AbortSignal | undefined,
  wakers?: Set<() => void>,
  handOff?: HandOffWatch<T>,
  mode?: WatchMode,
): Promise<T | typeof NO_HAND_OFF | undefined> {
  if (signal?.aborted) return Promise.reject(signal.reason);
  return new Promise<T | typeof NO_HAND_OFF | undefined>((resolve, reject) => {
    const round: WaitRound = { over: false };
    const tidy = (): void => {
      clearAlarm(alarm);
      signal?.removeEventListener('abort', settle);
      if (path !== undefined) watches.get(path)?.delete(reported);
    };
    const end = (taken: T | typeof NO_HAND_OFF | undefined): void => {
      round.over = true;
      wakers?.delete(settle); // now: the waiting acquire drops the id's set once it is empty
      if (taken === undefined && signal?.aborted) reject(signal.reason);
      else resolve(taken); // a taken hand-off is the caller's lease: never dropped for an abort
    };
    const settle = (): void => {
      if (round.over) return;
      end(undefined);
      setImmediate(tidy);
    };
    // The watch runs the tidy-up it returns once the report's microtasks have run: not even
    // scheduling it is on the woken waiter's path to its grant.
    const reported = (token?: bigint | null, expiry?: string): (() => void) | undefined => {
      if (round.over) return undefined;
      if (token === null) end(NO_HAND_OFF);
      else end(token === undefined || handOff === undefined ? undefined : handOff.take(token, expiry!));
      return tidy;
    };
    // First, so that if it throws (rejecting this promise) nothing is left set up.
    if (path !== undefined && !whenUnlocked(io, path, round, reported, handOff?.probe, mode)) {
      resolve(undefined);
      return;
    }
    const alarm = setAlarm(ms, settle);
    signal?.addEventListener('abort', settle, { once: true });
    wakers?.add(settle);
  });
}

/** Called once a watched lock is let go; with the record's token and expiry when the watch's probe
 * found a hand-off (see LeaseIO.watchUnlock), `null` when it found none, and nothing when the call
 * asked no probe (or shares a watch another call started). May return what to run once the report
 * is done. */
type Unlocked = (token?: bigint | null, expiry?: string) => (() => void) | undefined | void;

/**
 * Calls `unlocked` once nobody holds `path` exclusively (released, or its holder died), from the
 * watch's report itself, with no promise in between; `false` (and no call) if it does not exist or
 * nobody holds it now. `round` only stops a polling fallback. A `probe` and a `mode` (see
 * LeaseIO.watchUnlock) are asked only by a watch this call starts: a shared watch already has its
 * own (every watch of a file kind has the same mode: see WatchMode).
 */
export function whenUnlocked(
  io: LeaseIO,
  path: string,
  round: WaitRound,
  unlocked: Unlocked,
  probe?: HandOffProbe,
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
  const report: UnlockReport = (_errno, reportedToken, expiry) => {
    watches.delete(path);
    const token = probe === undefined ? undefined : (reportedToken ?? null);
    if (waiting.size === 1 && waiting.has(unlocked)) return unlocked(token, expiry); // the usual case: no iterator
    let later: (() => void) | undefined;
    for (const callback of waiting) {
      const after = callback === unlocked ? callback(token, expiry) : callback();
      if (typeof after !== 'function') continue;
      const before = later;
      later = before === undefined ? after : () => (before(), after());
    }
    return later;
  };
  const started = io.watchUnlock(path, report, probe, mode);
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
