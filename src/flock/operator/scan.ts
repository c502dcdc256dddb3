// Reading a lease directory: its files grouped by id, records, queues, and argument checks.

import fs from 'node:fs';
import { resolve } from 'node:path';
import { checkNumber } from '../../kernel/numbers.js';
import { LeaseCorruptError } from '../../port/errors.js';
import { checkSessionId } from '../../port/validate.js';
import { fileIO, type LeaseIO } from '../io.js';
import { parseLeaseFileName, safeID } from '../layout.js';
import { parseQueue, type WaitQueue } from '../queue.js';
import { RecordFormatError, type LeaseRecord } from '../record.js';
import { readRecordAt as readRecord } from '../transition.js';
import { kOperatorIO } from './types.js';

/** `<safeID>.corrupt-<yyyymmddThhmmssmmmZ>[-n]`: outside the names a lease writes or prune removes. */
const CORRUPT_COPY = /^([A-Za-z0-9_-]{1,40}-[0-9a-f]{16})\.corrupt-(\d{8}T\d{9}Z)(?:-\d+)?$/;

/** The Go original's temp records: `os.CreateTemp(dir, ".lease-*.json.tmp")`, `*` a decimal uint32. */
const GO_TEMP = /^\.lease-\d{1,10}\.json\.tmp$/;

/** The Go original's temp records in `dir` (names), sorted. */
export function listGoTemps(dir: string): string[] {
  return fs
    .readdirSync(dir)
    .filter((name) => GO_TEMP.test(name))
    .sort(compare);
}

export interface Group {
  readonly safe: string;
  record?: string;
  lock?: string;
  readonly lives: Array<{ name: string; token: bigint }>;
  readonly waits: Array<{ name: string; ticket: number }>;
  readonly temps: string[];
  readonly copies: string[];
}

function listGroups(dir: string, onlySafe: string | undefined): Map<string, Group> {
  const groups = new Map<string, Group>();
  const group = (safe: string): Group => {
    let g = groups.get(safe);
    if (g === undefined) groups.set(safe, (g = { safe, lives: [], waits: [], temps: [], copies: [] }));
    return g;
  };
  for (const name of fs.readdirSync(dir)) {
    const parsed = parseLeaseFileName(name);
    if (parsed !== undefined) {
      if (onlySafe !== undefined && parsed.safe !== onlySafe) continue;
      const g = group(parsed.safe);
      switch (parsed.kind) {
        case 'record':
          g.record = name;
          break;
        case 'lock':
          g.lock = name;
          break;
        case 'live':
          g.lives.push({ name, token: parsed.token });
          break;
        case 'wait':
          g.waits.push({ name, ticket: parsed.ticket });
          break;
        case 'temp':
          g.temps.push(name);
          break;
      }
      continue;
    }
    const copy = CORRUPT_COPY.exec(name);
    if (copy !== null && (onlySafe === undefined || copy[1] === onlySafe)) group(copy[1]!).copies.push(name);
  }
  return groups;
}

export type RecordRead =
  | { readonly kind: 'none' }
  | { readonly kind: 'ok'; readonly record: LeaseRecord }
  | { readonly kind: 'corrupt'; readonly problem: string; readonly error: LeaseCorruptError };

/** The Lease's record reader, with a corrupt record as a value the operator tools can report. */
export function readRecordAt(io: LeaseIO, path: string): RecordRead {
  let record: LeaseRecord | undefined;
  try {
    record = readRecord(io, path);
  } catch (error) {
    if (!(error instanceof LeaseCorruptError)) throw error;
    // A format error: the problem is the file and what is wrong, without the repair hint.
    const problem = error.cause instanceof RecordFormatError ? `${path}: ${error.cause.message}` : error.message;
    return { kind: 'corrupt', problem, error };
  }
  return record === undefined ? { kind: 'none' } : { kind: 'ok', record };
}

/** The wait queue in a `.lock` file, read without creating or locking it. */
export function readQueue(io: LeaseIO, path: string): WaitQueue {
  try {
    return parseQueue(io.readRecord(path));
  } catch {
    return parseQueue(undefined); // unreadable soft state: no queue to report
  }
}

/** What every scan of a directory starts from: the checked directory and id, the I/O and the clock. */
export interface Scan {
  readonly path: string;
  /** Only this session id, when given. */
  readonly id: string | undefined;
  readonly io: LeaseIO;
  readonly clock: () => number;
}

export function scanOf(dir: unknown, options: { id?: unknown; clock?: (() => number) | undefined }): Scan {
  const path = checkDir(dir);
  const id = checkOptionalId(options.id);
  return { path, id, io: ioOf(options), clock: clockOf(options) };
}

/** The scan's file groups (one id's alone when it has one). */
export function groupsOf(scan: Scan): Map<string, Group> {
  return listGroups(scan.path, scan.id === undefined ? undefined : safeID(scan.id));
}

/** The session id a group stands for: its record's, else the one asked for, else its safe name. */
export function sessionIdOf(read: RecordRead, scan: Scan, group: Group): string {
  return (read.kind === 'ok' ? read.record.session : undefined) ?? scan.id ?? group.safe;
}

export function ioOf(options: object | undefined): LeaseIO {
  return (options as { [kOperatorIO]?: LeaseIO } | undefined)?.[kOperatorIO] ?? fileIO;
}

export function clockOf(options: { clock?: (() => number) | undefined } | undefined): () => number {
  const clock = options?.clock;
  if (clock !== undefined && typeof clock !== 'function')
    throw new TypeError('clock must be a function returning epoch milliseconds');
  return clock ?? Date.now;
}

export function checkDir(dir: unknown): string {
  if (typeof dir !== 'string' || dir === '') throw new TypeError('dir must be a non-empty string');
  const path = resolve(dir);
  const st = fs.statSync(path); // ENOENT, EACCES... as they are, with the path
  if (!st.isDirectory()) {
    throw Object.assign(new Error(`ENOTDIR: not a directory, '${path}'`), { code: 'ENOTDIR', syscall: 'stat', path });
  }
  return path;
}

/** A millisecond option: the kernel's rule (0 allowed), `fallback` when absent. */
export function checkMs(value: unknown, what: string, fallback: number): number {
  return value === undefined ? fallback : checkNumber(value, what, { zero: true });
}

function checkOptionalId(id: unknown): string | undefined {
  if (id === undefined) return undefined;
  checkSessionId(id);
  return id;
}

export function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
