/**
 * The I/O layer: every system call a lease makes, in one place (the C side is the addon in
 * native/src/, a binding with no lease rules: it moves the bytes this side formats). Cheap non-blocking calls (open, a LOCK_NB flock, fstat, a small read,
 * unlink, close) are synchronous; the write side of a transition is one `commit` step that runs on
 * a libuv worker thread, because it fsyncs. Tests wrap this interface, or set the addon's fault
 * points, to inject faults.
 */
import { constants } from 'node:os';
import { nativeAddon } from '../native.js';
import { LeaseCorruptError, LeaseUnsupportedError } from '../port/errors.js';
import { makeLeaseDir } from './mkdir.js';

/** The write side of one transition. */
export interface CommitPlan {
  /** The record to replace (atomically: temp file, fsync, rename, fsync of the directory). */
  readonly record: string;
  readonly data: string;
  /** Create and exclusively flock this generation's liveness file first... */
  readonly live?: string | undefined;
  /** ...or (a hand-off) rename this flocked waiter's file to `live`: its flock becomes the new
   * generation's liveness lock. Renamed back if the commit fails. */
  readonly adoptFrom?: string | undefined;
  /** Files of finished generations to remove once the record is replaced (at most two). */
  readonly remove?: readonly string[] | undefined;
}

export interface CommitResult {
  /** The new generation's liveness fd (when the plan had `live`), else -1. */
  readonly liveFd: number;
  /** Removals that failed; the lease retries them on the next operation for the id. */
  readonly removalErrors: readonly NodeJS.ErrnoException[];
}

/**
 * A failed commit. Before the rename nothing changed (a new liveness file is closed and removed);
 * with `committed` the record was replaced and only the directory fsync failed.
 */
export interface CommitError extends NodeJS.ErrnoException {
  readonly committed?: boolean;
  readonly liveFd?: number;
}

export interface LeaseIO {
  /** Creates the lease directory (0700) and its parents if needed (see mkdir.ts); fails if the
   * path is not a directory. */
  prepareDir(dir: string): void;
  /** open(O_CREAT) + flock(LOCK_EX|LOCK_NB): the fd, `'busy'` when another holder has it, or
   * `'replaced'` when the path no longer names the inode we locked (pruned meanwhile: retry). */
  tryLockTransition(path: string): number | 'busy' | 'replaced';
  /** Releases the transition lock (closing drops the flock). */
  unlockTransition(fd: number): void;
  /** The record's content, or `undefined` when there is none: its text when it is all ASCII (as the
   * lease writes it: nothing to decode), else its bytes (decoded as UTF-8 by the reader). */
  readRecord(path: string): string | Uint8Array | undefined;
  /** Is this generation's liveness lock held by some process? (a shared LOCK_NB probe) */
  probeLive(path: string): boolean;
  /** Performs the write side of a transition (see CommitPlan). */
  commit(dir: string, plan: CommitPlan): Promise<CommitResult>;
  /** unlink; a missing file is not an error. */
  removeFile(path: string): void;
  /** Lets go of the lock a `.live` or `.wait` descriptor holds, then closes it (so the close's
   * notice comes with the lock free: see watchUnlock). Throws only if the descriptor may still be
   * open (so a retry makes sense). */
  closeFile(fd: number): void;
  /** Creates (or reuses) a file and holds it exclusively: the fd, or `undefined` if someone holds it. */
  lockFile(path: string): number | undefined;
  /** Does `path` (not followed) name the file open as `fd`? */
  sameFile(fd: number, path: string): boolean;
  /** The transition lock file's content (the wait queue), or `undefined` when empty: its text when it
   * is all ASCII (as the lease writes it for ASCII owners), else its bytes (see queue.ts). */
  readLockData(lockFd: number): string | Uint8Array | undefined;
  /** Replaces the transition lock file's content; not fsynced (the queue is soft state). */
  writeLockData(lockFd: number, text: string): void;
  /**
   * Calls `onUnlocked(errno)` once nobody holds an exclusive flock on `path` (its holder closed it,
   * or died): woken by the kernel in the event loop itself (inotify); a close that left it locked
   * is looked at again, and if it stays locked a thread blocked in flock waits for it (the kernel's
   * notice of a close comes just before it drops the lock; see native/src/watch.c). A watch that
   * starts in that instant misses it, so the lease unlocks before it closes (closeFile); a holder
   * that dies then is seen at the file's next close or the caller's own timer. `false` (and
   * no call) when there is nothing to wait for: no such file, or nobody holds it. Cannot be
   * cancelled: the watch ends with the lock it watches.
   * `mode`: see WatchMode.
   */
  watchUnlock(path: string, onUnlocked: UnlockReport, mode?: WatchMode): boolean;
}

/**
 * How a watch learns that a lock was let go; by default every close of the file is a cue to probe
 * it, and a close that left it held is waited out exactly (see watchUnlock).
 * - `'cue'`: the cues only, no thread while inotify watches: a release whose event came before
 *   the kernel dropped the lock goes unreported, and the caller must look again on its own timer
 *   (a transition lock's waiter: see transition.ts);
 * - `'writers'`: only the close of a descriptor open for writing is a cue. For a file that only
 *   this port's processes lock, always through such a descriptor (a waiter's `.wait`): the
 *   read-only probes of other processes then wake nobody. (Go opens its lock files read-only.)
 */
export type WatchMode = 'cue' | 'writers';

/** A watch's report: its errno. It may return what only tidies up, run once the report's
 * microtasks have run (after the woken code's own). */
export type UnlockReport = (errno: number) => (() => void) | undefined | void;

interface NativeIO {
  lockTransition(path: string): number;
  readRecord(path: string): string | Buffer | undefined;
  probeLive(path: string): boolean;
  closeFd(fd: number): void;
  unlockTransition(fd: number): void;
  removeFile(path: string): void;
  fsType(path: string): number;
  commit(...plan: NativePlan): Promise<CommitResult>;
  commitSync(...plan: NativePlan): CommitResult;
  lockFile(path: string): number;
  sameFile(fd: number, path: string): boolean;
  readLockData(fd: number): string | Buffer | undefined;
  writeLockData(fd: number, text: string): void;
  watchInit(dispatch: (id: number, errno: number) => void, drain: () => void): void;
  watchUnlock(path: string, id: number, mode: number): boolean;
  setFault(step: string, kind: string, value: number, count: number): void;
  clearFaults(): void;
}
/** A commit's plan as the addon takes it: record, dir, data, live, adoptFrom, two removals. */
type NativePlan = [
  record: string,
  dir: string,
  data: string,
  live: string | undefined,
  adoptFrom: string | undefined,
  remove0: string | undefined,
  remove1: string | undefined,
];

/** WatchMode as the addon takes it (its WATCH_* values; 0 is the default). */
const WATCH_MODES: Record<WatchMode, number> = { cue: 1, writers: 2 };

function addon(): NativeIO {
  return nativeAddon() as NativeIO;
}

const TMPFS_MAGIC = 0x01021994;
const RAMFS_MAGIC = 0x858458f6;
/** Directories whose commits run inline: on tmpfs every step is a memory operation of a few µs
 * (fsync has nothing to flush), less than the thread hop that would carry it. */
const inlineCommitDirs = new Set<string>();

/** flock errors that mean "no flock here". */
const UNSUPPORTED = new Set(['ENOLCK', 'EOPNOTSUPP', 'ENOTSUP', 'ENOSYS']);

/** Maps the addon's errors to the lease's: untrusted files are corrupt, no flock is unsupported. */
function leaseError(error: unknown): Error {
  const e = error as NodeJS.ErrnoException;
  const path = e.path ?? '';
  switch (e.code) {
    case 'ELOOP':
      return new LeaseCorruptError(`${path} is a symbolic link; lease files are never followed`, path, { cause: e });
    case 'EFTYPE':
      return new LeaseCorruptError(`${path} is not a regular file`, path, { cause: e });
    case 'EFBIG':
      return new LeaseCorruptError(`${path} is too big for a lease file`, path, { cause: e });
  }
  if (e.syscall === 'flock' && UNSUPPORTED.has(e.code ?? '')) {
    return new LeaseUnsupportedError(`flock is not supported for ${path} (${e.code}): use a local file system`, {
      cause: e,
    });
  }
  return e;
}

function rejectMapped(error: unknown): Promise<never> {
  return Promise.reject(leaseError(error));
}

/** `call` with the addon's errors mapped. One fixed parameter, not rest ones: rest parameters
 * allocate an arguments array on every system call. */
function mapped<R>(call: (path: string) => R): (path: string) => R {
  return (path) => {
    try {
      return call(path);
    } catch (error) {
      throw leaseError(error);
    }
  };
}

export const fileIO: LeaseIO = {
  prepareDir(dir) {
    const io = addon();
    makeLeaseDir(dir);
    const type = io.fsType(dir);
    if (type === TMPFS_MAGIC || type === RAMFS_MAGIC) inlineCommitDirs.add(dir);
    else inlineCommitDirs.delete(dir);
  },

  tryLockTransition: mapped((path) => {
    const fd = addon().lockTransition(path);
    return fd >= 0 ? fd : fd === -1 ? 'busy' : 'replaced';
  }),

  unlockTransition: (fd) => addon().unlockTransition(fd),

  readRecord: mapped((path) => addon().readRecord(path)),

  probeLive: mapped((path) => addon().probeLive(path)),

  // Not an async function: on tmpfs the result is there at once, and an async frame would cost
  // every commit an allocation and a promise hop. Every failure, thrown or rejected, is a rejection. The plan goes
  // to the addon as arguments: no object to make here, no property to look up there.
  commit(dir, { record, data, live, adoptFrom, remove }) {
    try {
      const io = addon();
      const remove0 = remove?.[0];
      const remove1 = remove?.[1];
      if (!inlineCommitDirs.has(dir))
        return io.commit(record, dir, data, live, adoptFrom, remove0, remove1).catch(rejectMapped);
      return Promise.resolve(io.commitSync(record, dir, data, live, adoptFrom, remove0, remove1));
    } catch (error) {
      return rejectMapped(error);
    }
  },

  removeFile: mapped((path) => addon().removeFile(path)),

  // The addon's close never reports a real close(2) error: Linux frees the descriptor even when
  // close fails (EINTR, EIO), so a retry could only close an unrelated file that reused the number,
  // and nothing was written through a lock descriptor. Only an injected fault leaves it open.
  closeFile: (fd) => addon().closeFd(fd),

  lockFile: mapped((path) => {
    const fd = addon().lockFile(path);
    return fd >= 0 ? fd : undefined;
  }),

  sameFile: (fd, path) => addon().sameFile(fd, path),

  readLockData: (fd) => addon().readLockData(fd),

  writeLockData: (fd, text) => addon().writeLockData(fd, text),

  watchUnlock(path, onUnlocked, mode) {
    const io = addon();
    if (watchCallbacks === undefined) {
      const callbacks = new Map<number, UnlockReport>();
      const later: (() => void)[] = [];
      io.watchInit(
        (id, errno) => {
          const callback = callbacks.get(id);
          callbacks.delete(id);
          const after = callback?.(errno);
          if (typeof after === 'function') later.push(after);
        },
        // Called by the addon once a batch of reports and their microtasks have run.
        () => {
          for (const after of later.splice(0)) after();
        },
      );
      watchCallbacks = callbacks;
    }
    const id = (nextWatchId = (nextWatchId + 1) >>> 0);
    const code = mode === undefined ? 0 : WATCH_MODES[mode];
    let watching: boolean;
    try {
      watching = io.watchUnlock(path, id, code);
    } catch (error) {
      throw leaseError(error);
    }
    if (watching) watchCallbacks.set(id, onUnlocked);
    return watching;
  },
};

/** Pending watches by id; the addon reports (id, errno) through one dispatcher, and may report an
 * id twice (its inotify side and its pool thread race): the second report finds nothing. */
let watchCallbacks: Map<number, UnlockReport> | undefined;
let nextWatchId = 0;

/**
 * Test-only fault points inside the addon: the next `count` executions of a system-call step
 * (e.g. 'temp.write', 'temp.fsync', 'rename', 'dir.fsync', 'live.flock', 'unlink', 'close',
 * 'lock.flock', 'commit.done') fail with an errno, SIGKILL or SIGSTOP the process, or stall.
 * Not exported from the package.
 */
export const faults = {
  fail(step: string, code: string, count = 1): void {
    const errno = (constants.errno as Record<string, number>)[code];
    if (errno === undefined) throw new RangeError(`unknown errno ${code}`);
    addon().setFault(step, 'errno', errno, count);
  },
  kill(step: string): void {
    addon().setFault(step, 'kill', 0, 1);
  },
  stop(step: string): void {
    addon().setFault(step, 'stop', 0, 1);
  },
  stall(step: string, ms: number, count = 1): void {
    addon().setFault(step, 'sleep', ms, count);
  },
  clear(): void {
    addon().clearFaults();
  },
};
