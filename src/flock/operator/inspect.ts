import { join } from 'node:path';
import { LeaseCorruptError } from '../../port/errors.js';
import { liveName } from '../layout.js';
import { parseQueue } from '../queue.js';
import { LockTable } from './proc-locks.js';
import {
  compare,
  groupsOf,
  listGoTemps,
  readQueue,
  readRecordAt,
  scanOf,
  sessionIdOf,
  type RecordRead,
} from './scan.js';
import { isExpired } from '../record.js';
import type { InspectOptions, Inspection, LeaseRow, LeaseState, LeaseWaiter, Leftover, LeftoverKind } from './types.js';

/**
 * Every lease in `dir` with its state, holder PID and queued waiters, and the leftover files.
 * Creates nothing, locks nothing exclusively, changes nothing.
 */
export function inspectLeaseDir(dir: string, options: InspectOptions = {}): Inspection {
  const scan = scanOf(dir, options);
  const { path, id, io } = scan;
  const now = scan.clock();
  const groups = groupsOf(scan);
  const table = LockTable.read();
  const leases: LeaseRow[] = [];
  const leftovers: Leftover[] = [];

  for (const g of groups.values()) {
    const read: RecordRead = g.record === undefined ? { kind: 'none' } : readRecordAt(io, join(path, g.record));
    const sessionId = sessionIdOf(read, scan, g);
    const leftover = (kind: LeftoverKind, name: string, extra: Partial<Leftover> = {}): void => {
      leftovers.push({
        kind,
        id: sessionId,
        safeId: g.safe,
        path: join(path, name),
        token: undefined,
        locked: undefined,
        pid: undefined,
        ...extra,
      });
    };
    const lookup = (name: string): { locked: boolean | undefined; pid: number | undefined } =>
      table?.lookup(join(path, name)) ?? { locked: table === undefined ? undefined : false, pid: undefined };

    let current: bigint | undefined; // the recorded generation
    let waiters: LeaseWaiter[] = [];
    if (read.kind !== 'none') {
      const recordPath = join(path, g.record!);
      let row: LeaseRow;
      if (read.kind === 'corrupt') {
        row = {
          id: sessionId,
          safeId: g.safe,
          state: 'corrupt',
          owner: undefined,
          token: undefined,
          expiry: undefined,
          locked: undefined,
          pid: undefined,
          waiters,
          path: recordPath,
          problem: read.problem,
        };
      } else {
        const { record } = read;
        if (record.owner !== '') current = record.token; // a tombstone has no generation of its own
        const live = join(path, liveName(g.safe, record.token));
        let state: LeaseState = record.owner === '' ? 'released' : isExpired(record, now) ? 'expired' : 'held';
        let problem: string | undefined;
        let locked: boolean | undefined = false;
        if (state !== 'released') {
          try {
            // The recorded generation's .live was flocked before its record was written: a
            // shared probe cannot race its creation (unlike a probe of any other lock file).
            locked = io.probeLive(live);
            if (state === 'held' && !locked) state = 'crashed';
          } catch (error) {
            if (!(error instanceof LeaseCorruptError)) throw error;
            state = 'corrupt';
            problem = error.message;
            locked = undefined;
          }
        }
        const pid = locked ? table?.lookup(live)?.pid : undefined;
        row = {
          id: sessionId,
          safeId: g.safe,
          state,
          owner: record.owner,
          token: record.token,
          expiry: new Date(record.expiryMs),
          locked,
          pid,
          waiters,
          path: recordPath,
          problem,
        };
      }
      // Queued waiters: the `.wait` files somebody holds, with owners from the queue.
      const queue = g.lock === undefined ? parseQueue(undefined) : readQueue(io, join(path, g.lock));
      const owners = new Map(queue.waiters.map((w) => [w.ticket, w.owner]));
      if (table === undefined) {
        // No lock table: the queue is all there is to go by (it may list waiters that died).
        waiters = queue.waiters.map((w) => ({ ticket: w.ticket, owner: w.owner, pid: undefined }));
        for (const w of g.waits) if (!owners.has(w.ticket)) leftover('orphan-wait', w.name);
      } else {
        for (const w of g.waits.sort((a, b) => a.ticket - b.ticket)) {
          const held = lookup(w.name);
          if (held.locked) waiters.push({ ticket: w.ticket, owner: owners.get(w.ticket), pid: held.pid });
          else leftover('orphan-wait', w.name, { locked: false });
        }
      }
      leases.push({ ...row, waiters });
    } else {
      if (g.lock !== undefined) leftover('stray-lock', g.lock);
      for (const w of g.waits) leftover('orphan-wait', w.name, lookup(w.name));
    }
    for (const l of g.lives) {
      if (l.token === current) continue;
      // Not probed: it could be a generation an acquirer is creating right now (created, not yet
      // flocked), and a probe there would make that acquire fail. /proc/locks tells without touching it.
      leftover('orphan-live', l.name, { token: l.token, ...lookup(l.name) });
    }
    for (const name of g.temps) leftover('temp', name);
    for (const name of g.copies) leftover('corrupt-copy', name);
  }
  if (id === undefined) {
    for (const name of listGoTemps(path)) {
      leftovers.push({
        kind: 'go-temp',
        id: '',
        safeId: '',
        path: join(path, name),
        token: undefined,
        locked: undefined,
        pid: undefined,
      });
    }
  }
  leases.sort((a, b) => compare(a.id, b.id) || compare(a.safeId, b.safeId));
  leftovers.sort((a, b) => compare(a.path, b.path));
  return { dir: path, at: new Date(now), leases, leftovers };
}
