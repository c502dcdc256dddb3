/** Output of the `flocklease` CLI: aligned tables for people, JSON for programs. */
import type { Inspection, LeaseRow, Leftover, PruneResult } from '../flock/operator/index.js';
import { displayText, relative, table } from '../kernel/display.js';

/** RFC 3339 in UTC, to the second: what a person reads. (JSON keeps the milliseconds.) */
export function isoSeconds(date: Date): string {
  return date.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** A note quotes a corrupt record's problem, which may quote the record. */
const NOTE_MAX = 160;

function note(row: LeaseRow): string {
  if (row.problem !== undefined)
    return row.problem.startsWith(`${row.path}: `) ? row.problem.slice(row.path.length + 2) : row.problem;
  switch (row.state) {
    case 'crashed':
      return 'holder died: the next acquire takes over';
    case 'expired':
      return row.locked ? 'holder still running, past its expiry: takeable' : 'takeable';
    default:
      return '';
  }
}

const LEFTOVER_NOTES: Record<Leftover['kind'], string> = {
  'orphan-live': 'liveness file of a finished generation',
  'orphan-wait': 'liveness file of a waiter that left',
  temp: 'an interrupted record write',
  'go-temp': "the Go original's interrupted record write",
  'stray-lock': 'transition lock of an id with no record',
  'corrupt-copy': 'a corrupt record set aside by repair (prune keeps it)',
};

function lockNote(l: Leftover): string {
  if (l.locked === undefined) return '';
  if (!l.locked) return 'not locked';
  return l.pid === undefined ? 'LOCKED by a process' : `LOCKED by pid ${l.pid}`;
}

export function inspectionText(inspection: Inspection, id: string | undefined): string {
  const now = inspection.at.getTime();
  const out: string[] = [];
  if (inspection.leases.length === 0) {
    const where = displayText(inspection.dir, Infinity);
    out.push(id === undefined ? `No leases in ${where}.` : `No lease for "${displayText(id)}" in ${where}.`);
  } else {
    const rows = inspection.leases.map((row) => [
      displayText(row.id),
      row.state,
      row.owner === undefined || row.owner === '' ? '-' : displayText(row.owner),
      row.token === undefined ? '-' : String(row.token),
      row.expiry === undefined ? '-' : `${isoSeconds(row.expiry)} (${relative(row.expiry.getTime(), now)})`,
      row.pid === undefined ? '-' : String(row.pid),
      String(row.waiters.length),
      displayText(note(row), NOTE_MAX),
    ]);
    out.push(table(['ID', 'STATE', 'OWNER', 'TOKEN', 'EXPIRY', 'PID', 'WAITERS', 'NOTE'], rows));
  }
  if (inspection.leftovers.length > 0) {
    out.push('', `Leftovers (${inspection.leftovers.length}):`);
    const rows = inspection.leftovers.map((l) => [
      displayText(l.path.slice(inspection.dir.length + 1)),
      l.kind,
      [LEFTOVER_NOTES[l.kind], lockNote(l)].filter(Boolean).join('; '),
    ]);
    out.push(table(['FILE', 'KIND', 'NOTE'], rows, '  '));
  }
  return `${out.join('\n')}\n`;
}

/** One object per lease and per leftover, all with the same fields (null where not applicable). */
export function inspectionJson(inspection: Inspection): unknown[] {
  const now = inspection.at.getTime();
  const leases = inspection.leases.map((row) => ({
    kind: 'lease',
    id: row.id,
    safeId: row.safeId,
    state: row.state,
    owner: row.owner ?? null,
    token: row.token === undefined ? null : String(row.token),
    expiry: row.expiry?.toISOString() ?? null,
    expiresInMs: row.expiry === undefined ? null : row.expiry.getTime() - now,
    locked: row.locked ?? null,
    pid: row.pid ?? null,
    waiters: row.waiters.length,
    queue: row.waiters.map((w) => ({ ticket: w.ticket, owner: w.owner ?? null, pid: w.pid ?? null })),
    path: row.path,
    problem: row.problem ?? null,
  }));
  const leftovers = inspection.leftovers.map((l) => ({
    kind: l.kind,
    id: l.id,
    safeId: l.safeId,
    state: 'leftover',
    owner: null,
    token: l.token === undefined ? null : String(l.token),
    expiry: null,
    expiresInMs: null,
    locked: l.locked ?? null,
    pid: l.pid ?? null,
    waiters: 0,
    queue: [],
    path: l.path,
    problem: null,
  }));
  return [...leases, ...leftovers];
}

export function pruneText(result: PruneResult): string {
  const verb = result.dryRun ? 'would remove' : 'removed';
  const file = (path: string): string => displayText(path.slice(result.dir.length + 1));
  const lines = result.removed.map((r) => `${verb} ${file(r.path)}  (${r.kind}: ${r.reason})`);
  for (const s of result.skipped) lines.push(`left alone ${displayText(s.id)}: ${displayText(s.reason, NOTE_MAX)}`);
  for (const e of result.errors)
    lines.push(`could not remove ${file(e.path)}: ${displayText(e.error.message, NOTE_MAX)}`);
  const records = result.removed.filter((r) => r.kind === 'record').length;
  lines.push(
    `${result.dryRun ? 'Dry run: would remove' : 'Removed'} ${result.removed.length} file${result.removed.length === 1 ? '' : 's'} ` +
      `(${records} record${records === 1 ? '' : 's'}); ${result.skipped.length} id${result.skipped.length === 1 ? '' : 's'} left alone` +
      (result.errors.length > 0
        ? `; ${result.errors.length} removal${result.errors.length === 1 ? '' : 's'} failed`
        : '') +
      '.',
  );
  return `${lines.join('\n')}\n`;
}

export function pruneJson(result: PruneResult): unknown {
  return {
    dir: result.dir,
    dryRun: result.dryRun,
    olderThanMs: result.olderThanMs,
    removed: result.removed,
    skipped: result.skipped,
    errors: result.errors.map((e) => ({
      path: e.path,
      message: e.error.message,
      code: (e.error as NodeJS.ErrnoException).code ?? null,
    })),
  };
}
