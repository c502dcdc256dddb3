/**
 * What every transition of an id shares, for the Lease and the operator tools alike: its context
 * (TransitionContext), taking the id's `<safeID>.lock` flock (bounded, re-checking the inode,
 * waiting in the kernel), and reading its record (a format error is a LeaseCorruptError naming the
 * file).
 */
import { LeaseCorruptError, LeaseTimeoutError } from '../port/errors.js';
import type { LeaseIO } from './io.js';
import { parseRecord, RecordFormatError, type LeaseRecord } from './record.js';
import type { Place, QueueRead } from './queue.js';
import { waitForUnlock } from './watch.js';

/** One transition of an id, under its transition lock: what every step of it is given. */
export interface TransitionContext {
  readonly sessionId: string;
  readonly safe: string;
  /** The clock's time when the lock was taken (epoch ms). */
  readonly now: number;
  readonly lockFd: number;
  /** The place of a waiting acquire; `undefined` for every other operation. */
  readonly place?: Place | undefined;
  /** The wait queue as this transition read it: the WaitLine's own, read once and kept in step
   * with what it writes. */
  queue?: QueueRead | undefined;
}

/** Tries of a busy transition lock that just yield to the event loop before waiting in the kernel. */
const TRANSITION_YIELDS = 3;
/** The longest a waiter for a busy transition lock sleeps before it tries again. Its watch is
 * inotify's alone (cue-only): a pool thread blocked in flock(LOCK_SH) would hold the lock shared
 * as it is let go, failing the waiters that take it, and at idle priority on busy CPUs it was seen
 * to hold it for milliseconds while every waiter spun.
 * This timer covers what inotify can miss: an event read before the kernel dropped the lock. */
const TRANSITION_LOOK_AGAIN_MS = 10;

export interface TransitionLockRequest {
  readonly io: LeaseIO;
  /** The id's `<safeID>.lock`. */
  readonly path: string;
  /** For the LeaseTimeoutError. */
  readonly sessionId: string;
  /** `performance.now()` by which the lock must be ours. */
  readonly deadline: number;
  /** The wait the caller asked for, named in the LeaseTimeoutError when given. */
  readonly timeoutMs?: number | undefined;
  readonly signal?: AbortSignal | undefined;
  /** Tries the lock once; defaults to `io.tryLockTransition` (the Lease also recreates its dir). */
  readonly tryLock?: ((path: string) => number | 'busy' | 'replaced') | undefined;
  /** The outcome of a try the caller already made (the Lease's synchronous first one): not repeated. */
  readonly firstTry?: 'busy' | 'replaced' | undefined;
}

/**
 * Takes the id's transition lock: its fd (release with `io.unlockTransition`). Another process in
 * a transition holds it for microseconds, so a busy lock is first retried after yielding to the
 * event loop, then waited for in the kernel (the addon's inotify watch, see watch.ts; tried again
 * at least every TRANSITION_LOOK_AGAIN_MS), until `deadline`: then LeaseTimeoutError. A lock file
 * pruned under us (`'replaced'`) is retried at once.
 */
export async function lockTransition(request: TransitionLockRequest): Promise<number> {
  const { io, path, signal, deadline } = request;
  const tryLock = request.tryLock ?? ((p: string) => io.tryLockTransition(p));
  for (let tries = 0; ; tries++) {
    const fd = tries === 0 && request.firstTry !== undefined ? request.firstTry : tryLock(path);
    if (typeof fd === 'number') return fd;
    if (fd === 'replaced') continue; // the lock file was pruned under us: lock the new one
    const left = deadline - performance.now();
    if (left <= 0) {
      const within = request.timeoutMs === undefined ? 'in time' : `within ${request.timeoutMs} ms`;
      throw new LeaseTimeoutError(
        `the transition lock ${path} was not free ${within}: ` +
          'another process is in (or stopped in) an operation on this id',
        request.sessionId,
      );
    }
    if (tries < TRANSITION_YIELDS) await yieldToLoop(signal);
    else await waitForUnlock(io, path, Math.min(left, TRANSITION_LOOK_AGAIN_MS), signal, undefined, 'cue');
  }
}

function yieldToLoop(signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => setImmediate(() => (signal?.aborted ? reject(signal.reason) : resolve())));
}

/**
 * The record at `path`, or `undefined` when there is none. An unreadable one (bad format, a
 * symlink, not a regular file, too big) is a LeaseCorruptError naming the file; for a format
 * error its `cause` is the RecordFormatError saying what is wrong.
 */
export function readRecordAt(io: LeaseIO, path: string): LeaseRecord | undefined {
  const content = io.readRecord(path); // already a LeaseCorruptError for a file that is not a record
  if (content === undefined) return undefined;
  try {
    return parseRecord(content);
  } catch (error) {
    if (!(error instanceof RecordFormatError)) throw error;
    const message = `${path}: ${error.message}; nothing was changed (see \`flocklease repair\`)`;
    throw new LeaseCorruptError(message, path, { cause: error });
  }
}
