/**
 * The I/O layer: every system call a lease makes, in one place. Cheap non-blocking calls (open, a
 * LOCK_NB flock, fstat, a small read, unlink, close) run synchronously; the record write, which
 * fsyncs, runs off the main thread. Tests wrap this interface to inject faults.
 */
import fs from 'node:fs';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import writeFileAtomic from 'write-file-atomic';
import { LeaseCorruptError, LeaseUnsupportedError } from '../port/errors.js';

export interface LeaseIO {
  /** Creates the lease directory (0700) if needed; fails if the path is not a directory. */
  prepareDir(dir: string): void;
  /** open(O_CREAT) + flock(LOCK_EX|LOCK_NB). The fd, `'busy'` when another holder has it, or
   * `'replaced'` when the path no longer names the inode we locked (pruned meanwhile: retry). */
  tryLockTransition(path: string): number | 'busy' | 'replaced';
  /** Releases the transition lock (closing drops the flock). */
  unlockTransition(fd: number): void;
  /** The record's bytes, or `undefined` when there is none. */
  readRecord(path: string): Uint8Array | undefined;
  /** Is this generation's liveness lock held by a process? (shared LOCK_NB probe, fresh fd) */
  probeLive(path: string): boolean;
  /** Creates and exclusively flocks a generation's liveness lock; `undefined` if someone holds it. */
  openLive(path: string): number | undefined;
  /** Atomically replaces the record: temp file, fsync, rename, fsync of the directory. */
  writeRecord(path: string, data: string): Promise<void>;
  /** unlink; a missing file is not an error. */
  removeFile(path: string): void;
  /** Throws only if the descriptor may still be open (so a retry makes sense). */
  closeFile(fd: number): void;
}

type FsExt = typeof import('fs-ext');
const require = createRequire(import.meta.url);
let fsExt: FsExt | undefined;
let fsExtLoadError: unknown;
try {
  fsExt = require('fs-ext') as FsExt;
} catch (error) {
  fsExtLoadError = error; // reported as LeaseUnsupportedError when a Lease is used, not at import
}

function flock(): FsExt['flockSync'] {
  if (fsExt === undefined) {
    throw new LeaseUnsupportedError(`flock is not available: the fs-ext addon did not load (${String(fsExtLoadError)})`, {
      cause: fsExtLoadError,
    });
  }
  return fsExt.flockSync;
}

const { O_RDONLY, O_RDWR, O_CREAT, O_NOFOLLOW, O_NONBLOCK, O_DIRECTORY } = fs.constants;
/** Record files are small; anything bigger is not one of ours. */
const MAX_RECORD_BYTES = 64 * 1024;
/** flock errors that mean "no flock on this file system". */
const UNSUPPORTED = new Set(['ENOLCK', 'EOPNOTSUPP', 'ENOTSUP', 'ENOSYS', 'EINVAL']);

const errnoOf = (error: unknown): string | undefined => (error as NodeJS.ErrnoException | null)?.code;

/** fs-ext's errors lack the path; add it so an operator knows which file. */
function withPath(error: unknown, syscall: string, path: string): unknown {
  const e = error as NodeJS.ErrnoException;
  if (UNSUPPORTED.has(e.code ?? '')) {
    return new LeaseUnsupportedError(`flock is not supported for ${path} (${e.code}): use a local file system`, { cause: e });
  }
  if (typeof e === 'object' && e !== null && e.path === undefined) {
    e.path = path;
    e.syscall ??= syscall;
    e.message = `${e.message}, ${syscall} '${path}'`;
  }
  return e;
}

/** Opens a lease file without following a symlink: a planted link is an error, not a redirect. */
function openNoFollow(path: string, flags: number): number {
  try {
    return fs.openSync(path, flags | O_NOFOLLOW, 0o600);
  } catch (error) {
    if (errnoOf(error) === 'ELOOP') {
      throw new LeaseCorruptError(`${path} is a symbolic link; lease files are never followed`, path, { cause: error });
    }
    throw error;
  }
}

function checkRegular(fd: number, path: string): fs.Stats {
  const stat = fs.fstatSync(fd);
  if (!stat.isFile()) {
    fs.closeSync(fd);
    throw new LeaseCorruptError(`${path} is not a regular file`, path);
  }
  return stat;
}

/** Tries LOCK_NB; false when another open file description holds a conflicting lock. */
function tryFlock(fd: number, mode: 'exnb' | 'shnb', path: string): boolean {
  try {
    flock()(fd, mode);
    return true;
  } catch (error) {
    if (errnoOf(error) === 'EAGAIN' || errnoOf(error) === 'EWOULDBLOCK') return false;
    throw withPath(error, 'flock', path);
  }
}

function closeQuietly(fd: number): void {
  try {
    fs.closeSync(fd);
  } catch {
    // Only reached on a path that is already failing; Linux frees the descriptor regardless.
  }
}

function fsyncDirectory(dir: string): Promise<void> {
  const fd = fs.openSync(dir, O_RDONLY | O_DIRECTORY);
  return new Promise((resolve, reject) => {
    fs.fsync(fd, (error) => {
      closeQuietly(fd);
      if (error) reject(withPath(error, 'fsync', dir));
      else resolve();
    });
  });
}

export const fileIO: LeaseIO = {
  prepareDir(dir) {
    try {
      fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    } catch (error) {
      if (errnoOf(error) !== 'EEXIST' && errnoOf(error) !== 'ENOTDIR') throw error;
    }
    if (!fs.statSync(dir).isDirectory()) {
      throw Object.assign(new Error(`ENOTDIR: the lease directory is not a directory, '${dir}'`), {
        code: 'ENOTDIR',
        syscall: 'mkdir',
        path: dir,
      });
    }
  },

  tryLockTransition(path) {
    const fd = openNoFollow(path, O_RDWR | O_CREAT);
    try {
      const locked = checkRegular(fd, path);
      if (!tryFlock(fd, 'exnb', path)) {
        fs.closeSync(fd);
        return 'busy';
      }
      // Prune may have unlinked (and someone recreated) the path while we opened it: a lock on
      // the old inode serializes nothing. Retry on the current one.
      let current: fs.Stats | undefined;
      try {
        current = fs.lstatSync(path);
      } catch (error) {
        if (errnoOf(error) !== 'ENOENT') throw error;
      }
      if (current?.ino !== locked.ino || current.dev !== locked.dev) {
        fs.closeSync(fd);
        return 'replaced';
      }
      return fd;
    } catch (error) {
      closeQuietly(fd);
      throw error;
    }
  },

  unlockTransition(fd) {
    fs.closeSync(fd);
  },

  readRecord(path) {
    let fd: number;
    try {
      // O_NONBLOCK: a FIFO planted here must not hang the open.
      fd = openNoFollow(path, O_RDONLY | O_NONBLOCK);
    } catch (error) {
      if (errnoOf(error) === 'ENOENT') return undefined;
      throw error;
    }
    try {
      const { size } = checkRegular(fd, path);
      if (size > MAX_RECORD_BYTES) throw new LeaseCorruptError(`${path} is ${size} bytes, too big for a lease record`, path);
      const buffer = Buffer.allocUnsafe(size + 1); // +1: notice a file that grew since fstat
      let length = 0;
      for (let n; (n = fs.readSync(fd, buffer, length, buffer.length - length, null)) > 0; ) {
        length += n;
        if (length === buffer.length) throw new LeaseCorruptError(`${path} changed while being read`, path);
      }
      return buffer.subarray(0, length);
    } finally {
      closeQuietly(fd);
    }
  },

  probeLive(path) {
    let fd: number;
    try {
      fd = openNoFollow(path, O_RDONLY | O_NONBLOCK);
    } catch (error) {
      if (errnoOf(error) === 'ENOENT') return false; // no liveness file: nobody can hold it
      throw error;
    }
    try {
      // Shared, so two probes (an acquirer and `flocklease inspect`) never see each other as a holder.
      return !tryFlock(fd, 'shnb', path);
    } finally {
      closeQuietly(fd);
    }
  },

  openLive(path) {
    const fd = openNoFollow(path, O_RDWR | O_CREAT);
    try {
      checkRegular(fd, path);
      if (tryFlock(fd, 'exnb', path)) return fd;
    } catch (error) {
      closeQuietly(fd);
      throw error;
    }
    fs.closeSync(fd);
    return undefined;
  },

  async writeRecord(path, data) {
    // write-file-atomic fsyncs the temp file and renames it over; the rename itself is durable only
    // once the directory is fsynced, which it does not do.
    // chown: false (not in its types) skips the stat+chown it otherwise copies from the old file.
    await writeFileAtomic(path, data, { mode: 0o600, chown: false as unknown as undefined, fsync: true });
    await fsyncDirectory(dirname(path));
  },

  removeFile(path) {
    try {
      fs.unlinkSync(path);
    } catch (error) {
      if (errnoOf(error) !== 'ENOENT') throw error;
    }
  },

  closeFile(fd) {
    // Never throws here: Linux frees the descriptor even when close(2) reports an error (EINTR,
    // EIO), so a retry could only close an unrelated file that reused the number; and nothing was
    // written through a lock descriptor, so no data is at stake. Fault injection exercises the
    // retry path that a failing close would take on a system where the descriptor survives.
    closeQuietly(fd);
  },
};
