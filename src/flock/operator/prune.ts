// Prune: remove what finished leases left behind.
import fs from 'node:fs';
import { join } from 'node:path';
import { LeaseCorruptError, LeaseTimeoutError } from '../../port/errors.js';
import { liveName, lockName, recordName, waitName } from '../layout.js';
import type { LeaseIO } from '../io.js';
import { parseQueue, type WaitQueue } from '../queue.js';
import { LockTable } from './proc-locks.js';
import {
  checkMs,
  compare,
  groupsOf,
  listGoTemps,
  readQueue,
  readRecordAt,
  scanOf,
  sessionIdOf,
  type Group,
  type RecordRead,
} from './scan.js';
import { expiresAtMs, isExpired } from '../record.js';
import { underLock } from './transition.js';
import {
  DEFAULT_LOCK_TIMEOUT_MS,
  DEFAULT_PRUNE_AGE_MS,
  GO_TEMP_MIN_AGE_MS,
  type PrunedKind,
  type PruneOptions,
  type PruneRemoval,
  type PruneResult,
  type PruneSkip,
} from './types.js';

interface Probe {
  /** Is this lock file held by a process? (undefined: cannot tell) */
  locked(name: string): boolean | undefined;
}

interface Plan {
  /** Leave the whole id alone: why. */
  readonly skip?: string;
  /** Why the lease itself stays (held, too young...), while its leftovers may still go. */
  readonly kept?: string;
  readonly removals: PruneRemoval[];
  /** Whether the `.lock` may go too (after everything else went). */
  readonly removeLock: boolean;
}

/**
 * What to remove for one id. `record` and `queue` are as read (under the lock in a real prune);
 * `probe` tells which lock files are held.
 */
function planPrune(
  dir: string,
  g: Group,
  read: RecordRead,
  queue: WaitQueue,
  probe: Probe,
  now: number,
  olderThanMs: number,
): Plan {
  const id = (read.kind === 'ok' ? read.record.session : undefined) ?? g.safe;
  const removals: PruneRemoval[] = [];
  const add = (kind: PrunedKind, name: string, reason: string): void => {
    removals.push({ kind, id, safeId: g.safe, path: join(dir, name), reason });
  };
  if (read.kind === 'corrupt')
    return { skip: `corrupt record (${read.problem}); see \`flocklease repair\``, removals, removeLock: false };

  // Live waiters: the listed .wait files and the queue's (one may have queued since the listing).
  const waitNames = new Set([...g.waits.map((w) => w.name), ...queue.waiters.map((w) => waitName(g.safe, w.ticket))]);
  const liveWaiters = [...waitNames].filter((name) => probe.locked(name) !== false);
  if (liveWaiters.length > 0) {
    return {
      skip: `${liveWaiters.length} queued waiter${liveWaiters.length === 1 ? '' : 's'}`,
      removals,
      removeLock: false,
    };
  }

  let keepRecord = read.kind === 'ok';
  let kept: string | undefined;
  const record = read.kind === 'ok' ? read.record : undefined;
  if (record !== undefined) {
    const age = now - expiresAtMs(record);
    const released = record.owner === '';
    const expired = isExpired(record, now);
    const running = !released && probe.locked(liveName(g.safe, record.token)) !== false;
    const dead = released || (expired && !running);
    // A takeover without the record gets max(1, wall-clock µs): it beats this token only if the
    // clock is already past it (a token issued this millisecond, or by a Go process that counts +1, may not be).
    const beaten = record.token < BigInt(Math.floor(now * 1000));
    const finished = released ? `released ${ago(age)}` : `expired ${ago(age)}, holder gone`;
    if (!dead) kept = !expired ? (running ? 'held' : 'crashed, not yet expired') : 'expired, its holder still running';
    else if (age < olderThanMs) kept = `${finished}: newer than the prune age`;
    else if (!beaten) kept = `${finished}: its token is ahead of the clock`;
    else {
      keepRecord = false;
      add('record', g.record!, finished);
    }
  }
  for (const w of g.waits) add('orphan-wait', w.name, 'no waiter holds it');
  let keptLive = false;
  for (const l of g.lives) {
    if (keepRecord && record?.owner !== '' && record?.token === l.token) {
      keptLive = true; // the lease's own generation
      continue;
    }
    if (probe.locked(l.name) !== false) {
      keptLive = true; // someone holds it: never remove a held lock file
      continue;
    }
    add('orphan-live', l.name, 'no process holds it');
  }
  for (const name of g.temps) add('temp', name, 'an interrupted record write');
  const removeLock = !keepRecord && !keptLive;
  if (removeLock && g.lock !== undefined)
    add('lock', g.lock, record === undefined ? 'no record' : 'its record was pruned');
  return { removals, removeLock, kept };
}

function ago(ms: number): string {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))}ms ago`;
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h${Math.floor((s % 3600) / 60)}m ago`;
  return `${Math.floor(s / 86_400)}d${Math.floor((s % 86_400) / 3600)}h ago`;
}

/**
 * Removes what finished leases left behind: released records (and expired ones whose holder is
 * gone) at least `olderThanMs` past their expiry, orphan `.live` and `.wait` files nobody holds,
 * temp files of interrupted writes, and the `.lock` file of an id with nothing left. Each id is
 * pruned under its transition lock; the `.lock` goes last, still flocked (a process that opened it
 * just before the unlink sees the path no longer names what it locked, and retries). Never touches
 * a held or unexpired lease, an id with queued waiters, a corrupt record, or a corrupt copy.
 * Tokens stay monotone: a record is removed only when the wall clock (in µs) is already past its
 * token, and a takeover with no record takes max(1, wall-clock µs).
 */
export async function pruneLeaseDir(dir: string, options: PruneOptions = {}): Promise<PruneResult> {
  const scan = scanOf(dir, options);
  const { path, id, io, clock } = scan;
  const olderThanMs = checkMs(options.olderThanMs, 'olderThanMs', DEFAULT_PRUNE_AGE_MS);
  const timeoutMs = checkMs(options.lockTimeoutMs, 'lockTimeoutMs', DEFAULT_LOCK_TIMEOUT_MS);
  const dryRun = options.dryRun === true;
  const groups = groupsOf(scan);
  const removed: PruneRemoval[] = [];
  const skipped: PruneSkip[] = [];
  const errors: Array<{ path: string; error: Error }> = [];

  for (const g of [...groups.values()].sort((a, b) => compare(a.safe, b.safe))) {
    const name = (read: RecordRead): string => sessionIdOf(read, scan, g);
    if (dryRun) {
      // No lock (taking it could create a file): decide from what is there now, probing nothing
      // but the recorded generation (see inspect).
      const read: RecordRead = g.record === undefined ? { kind: 'none' } : readRecordAt(io, join(path, g.record));
      const queue = g.lock === undefined ? parseQueue(undefined) : readQueue(io, join(path, g.lock));
      const plan = planPrune(path, g, read, queue, observerProbe(io, path, g, read), clock(), olderThanMs);
      const leftAlone = plan.skip ?? plan.kept;
      if (leftAlone !== undefined) skipped.push({ id: name(read), safeId: g.safe, reason: leftAlone });
      if (plan.skip === undefined) removed.push(...plan.removals);
      continue;
    }
    if (g.record === undefined && g.lock === undefined && g.lives.length + g.waits.length + g.temps.length === 0)
      continue; // only corrupt copies
    try {
      await underLock(io, path, g.safe, id ?? g.safe, timeoutMs, (lockFd) => {
        const read = readRecordAt(io, join(path, recordName(g.safe)));
        const queue = parseQueue(io.readLockData(lockFd));
        // What is still there now that no operation on this id is running (files listed before
        // the lock may have gone since; files that appeared since are left for the next prune).
        const exists = (file: string): boolean => fs.existsSync(join(path, file));
        const now: Group = {
          ...g,
          record: read.kind === 'none' ? undefined : recordName(g.safe),
          lives: g.lives.filter((l) => exists(l.name)),
          waits: g.waits.filter((w) => exists(w.name)),
          temps: g.temps.filter(exists),
        };
        // Under the transition lock nobody creates a lock file for this id, so probing is safe.
        const probe: Probe = { locked: (file) => io.probeLive(join(path, file)) };
        const plan = planPrune(path, now, read, queue, probe, clock(), olderThanMs);
        if (plan.skip !== undefined) {
          skipped.push({ id: name(read), safeId: g.safe, reason: plan.skip });
          return;
        }
        if (plan.kept !== undefined) skipped.push({ id: name(read), safeId: g.safe, reason: plan.kept });
        let failed = false;
        for (const removal of plan.removals) {
          if (removal.kind === 'lock') continue;
          try {
            io.removeFile(removal.path);
            removed.push(removal);
          } catch (error) {
            failed = true;
            errors.push({ path: removal.path, error: error as Error });
          }
        }
        // Last, and still flocked: the lock file of an id with nothing left (reported only if it
        // was there before this prune, not when the prune itself created it to lock the id).
        if (plan.removeLock && !failed) {
          const lockPath = join(path, lockName(g.safe));
          try {
            io.removeFile(lockPath);
            const listed = plan.removals.find((r) => r.kind === 'lock');
            if (listed !== undefined) removed.push(listed);
          } catch (error) {
            errors.push({ path: lockPath, error: error as Error });
          }
        }
      });
    } catch (error) {
      // The id's name for the report, read without the lock (best effort).
      const label = (): string => {
        try {
          return name(g.record === undefined ? { kind: 'none' } : readRecordAt(io, join(path, g.record)));
        } catch {
          return id ?? g.safe;
        }
      };
      if (error instanceof LeaseTimeoutError) {
        skipped.push({ id: label(), safeId: g.safe, reason: `its transition lock stayed busy for ${timeoutMs} ms` });
      } else if (error instanceof LeaseCorruptError) {
        skipped.push({ id: label(), safeId: g.safe, reason: error.message }); // e.g. a symlink planted as its .lock
      } else {
        throw error;
      }
    }
  }
  if (id === undefined) removeGoTemps(io, path, clock(), olderThanMs, dryRun, removed, errors);
  return { dir: path, dryRun, olderThanMs, removed, skipped, errors };
}

/** Lock state as an observer sees it: a probe of the recorded generation only, /proc/locks for the rest. */
function observerProbe(io: LeaseIO, dir: string, g: Group, read: RecordRead): Probe {
  const table = LockTable.read();
  const current = read.kind === 'ok' ? liveName(g.safe, read.record.token) : undefined;
  return {
    locked: (name) => {
      if (name === current) return io.probeLive(join(dir, name));
      if (table === undefined) return undefined;
      return table.lookup(join(dir, name))?.locked ?? false;
    },
  };
}

/** The Go original's temp records, once old enough (see GO_TEMP_MIN_AGE_MS): they name no id to lock. */
function removeGoTemps(
  io: LeaseIO,
  dir: string,
  now: number,
  olderThanMs: number,
  dryRun: boolean,
  removed: PruneRemoval[],
  errors: Array<{ path: string; error: Error }>,
): void {
  const minAgeMs = Math.max(olderThanMs, GO_TEMP_MIN_AGE_MS);
  for (const name of listGoTemps(dir)) {
    const path = join(dir, name);
    let st: fs.Stats;
    try {
      st = fs.lstatSync(path);
    } catch {
      continue; // renamed into place or removed meanwhile
    }
    const age = now - st.mtimeMs;
    if (st.isDirectory() || age < minAgeMs) continue;
    const removal: PruneRemoval = {
      kind: 'go-temp',
      id: '',
      safeId: '',
      path,
      reason: `the Go original's interrupted record write, written ${ago(age)}`,
    };
    if (dryRun) {
      removed.push(removal);
      continue;
    }
    try {
      io.removeFile(path);
      removed.push(removal);
    } catch (error) {
      errors.push({ path, error: error as Error });
    }
  }
}
