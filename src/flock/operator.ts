/**
 * The operator's side of a lease directory: look at it without disturbing anything (inspect),
 * clean up what finished leases left behind (prune), replace a corrupt record (repair), and break
 * a lease (forceRelease). The `flocklease` CLI is a thin layer over these.
 *
 * Mutations work one id at a time under that id's transition lock (`<safeID>.lock`, the same flock
 * every lease operation takes), so they never interleave with an acquire, renew or release. Inspect
 * takes no lock and creates nothing: it reads records, probes the current generation's `.live` with
 * a shared non-blocking flock (as an acquirer does), and learns everything else — which other lock
 * files are held, and by which process — from /proc/locks, without opening them.
 */
import fs from 'node:fs';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { LeaseCorruptError, LeaseTimeoutError, LeaseTokenExhaustedError } from '../port/errors.js';
import { nextToken } from '../kernel/token.js';
import { checkSessionId } from '../port/validate.js';
import { fileIO, type LeaseIO } from './io.js';
import { liveName, lockName, parseLeaseFileName, recordName, safeID, waitName } from './layout.js';
import { parseQueue, type WaitQueue } from './queue.js';
import { formatRecord, parseRecord, RecordFormatError, type LeaseRecord } from './record.js';

// ---------------------------------------------------------------------------------------------
// Types

/**
 * - `held`: unexpired, and a process holds the generation's `.live` flock.
 * - `crashed`: unexpired, but nobody holds its `.live`: the holder died; the next acquire takes over.
 * - `expired`: past its expiry (the holder may still be alive: it reclaims it on renew unless
 *   someone takes it over first).
 * - `released`: a tombstone (owner "").
 * - `corrupt`: the record cannot be read (see `problem`); acquires fail until `repairLease`.
 */
export type LeaseState = 'held' | 'crashed' | 'expired' | 'released' | 'corrupt';
export const LEASE_STATES: readonly LeaseState[] = ['held', 'crashed', 'expired', 'released', 'corrupt'];

/** A process queued for the lease (an acquire with `waitMs`). */
export interface LeaseWaiter {
  readonly ticket: number;
  /** From the wait queue; undefined when the queue does not list it. */
  readonly owner: string | undefined;
  readonly pid: number | undefined;
}

/** One lease: what its record says, and what the kernel says about its holder. */
export interface LeaseRow {
  /** The session id: the record's `session` field, else the id asked for, else the safe name. */
  readonly id: string;
  readonly safeId: string;
  readonly state: LeaseState;
  /** The record's owner ("" for a tombstone); undefined when corrupt. */
  readonly owner: string | undefined;
  readonly token: bigint | undefined;
  readonly expiry: Date | undefined;
  /** Whether a process holds the recorded generation's `.live` flock (false for a tombstone,
   * undefined for a corrupt record). `expired` with `locked`: the holder is still running. */
  readonly locked: boolean | undefined;
  /** The process holding the generation's `.live` flock, where the OS tells (Linux: /proc/locks). */
  readonly pid: number | undefined;
  /** Processes queued for it, in arrival order. */
  readonly waiters: readonly LeaseWaiter[];
  /** The record file. */
  readonly path: string;
  /** Why a corrupt record cannot be read. */
  readonly problem: string | undefined;
}

/**
 * A file no lease needs (or, for `corrupt-copy`, kept for the operator):
 * - `orphan-live`: a `.live` file that is not the recorded generation's;
 * - `orphan-wait`: a `.wait` file of no queued live waiter;
 * - `temp`: a record write that never finished (`<safeID>.lease.json.<pid>-<n>.tmp`);
 * - `stray-lock`: a transition lock of an id that has no record;
 * - `corrupt-copy`: a corrupt record that `repairLease` set aside (`<safeID>.corrupt-<time>`).
 */
export type LeftoverKind = 'orphan-live' | 'orphan-wait' | 'temp' | 'stray-lock' | 'corrupt-copy';

export interface Leftover {
  readonly kind: LeftoverKind;
  /** The session id when a record of the same safe name tells it, else the safe name. */
  readonly id: string;
  readonly safeId: string;
  readonly path: string;
  /** The generation's token, for `orphan-live`. */
  readonly token: bigint | undefined;
  /** Whether a process holds it flocked (`.live`, `.wait` files); undefined when unknown. */
  readonly locked: boolean | undefined;
  readonly pid: number | undefined;
}

export interface Inspection {
  readonly dir: string;
  /** When it was read (the reference for expiries). */
  readonly at: Date;
  /** Sorted by id. */
  readonly leases: readonly LeaseRow[];
  /** Sorted by file name. */
  readonly leftovers: readonly Leftover[];
}

export interface InspectOptions {
  /** Only this session id. */
  readonly id?: string | undefined;
  /** Wall clock in epoch ms (tests); default Date.now. */
  readonly clock?: (() => number) | undefined;
}

export interface MutationOptions {
  /** How long to wait for the id's transition lock (held for microseconds by a running
   * operation; long only if a process is stopped inside one). Default 10 s. */
  readonly lockTimeoutMs?: number | undefined;
  readonly clock?: (() => number) | undefined;
}

export interface PruneOptions extends MutationOptions {
  /** Remove released (and dead expired) records only once their expiry is at least this old.
   * Default 24 h. 0 removes them all. */
  readonly olderThanMs?: number | undefined;
  /** Decide, report, change nothing (and take no lock). */
  readonly dryRun?: boolean | undefined;
  /** Only this session id. */
  readonly id?: string | undefined;
}

export type PrunedKind = 'record' | 'orphan-live' | 'orphan-wait' | 'temp' | 'lock';

export interface PruneRemoval {
  readonly kind: PrunedKind;
  readonly id: string;
  readonly safeId: string;
  readonly path: string;
  /** Why it may go, e.g. "released 3h0m ago". */
  readonly reason: string;
}

export interface PruneSkip {
  readonly id: string;
  readonly safeId: string;
  /** Why the id was left alone entirely (queued waiters, corrupt record, lock busy). */
  readonly reason: string;
}

export interface PruneResult {
  readonly dir: string;
  readonly dryRun: boolean;
  readonly olderThanMs: number;
  /** What was removed (or, in a dry run, would be). */
  readonly removed: readonly PruneRemoval[];
  /** Ids left alone, and why. */
  readonly skipped: readonly PruneSkip[];
  /** Removals that failed (the file stays; the next prune tries again). */
  readonly errors: ReadonlyArray<{ readonly path: string; readonly error: Error }>;
}

export type RepairResult =
  | { readonly status: 'repaired'; readonly id: string; readonly path: string; readonly problem: string; readonly copy: string; readonly token: bigint; readonly removed: readonly string[]; readonly stillHeldBy: readonly number[] }
  | { readonly status: 'healthy'; readonly id: string; readonly path: string }
  | { readonly status: 'missing'; readonly id: string; readonly path: string };

export type ForceReleaseResult =
  | {
      readonly status: 'released';
      readonly id: string;
      readonly path: string;
      /** What the record said before. */
      readonly previous: { readonly owner: string; readonly token: bigint; readonly expiry: Date; readonly state: 'held' | 'crashed' | 'expired' };
      /** The holder's process, if it was alive (it loses the lease at its next renew). */
      readonly pid: number | undefined;
      /** The tombstone's token. */
      readonly token: bigint;
    }
  | { readonly status: 'already-released'; readonly id: string; readonly path: string; readonly token: bigint }
  | { readonly status: 'missing'; readonly id: string; readonly path: string };

export const DEFAULT_PRUNE_AGE_MS = 24 * 3_600_000;
export const DEFAULT_LOCK_TIMEOUT_MS = 10_000;

/** Internal: the I/O layer (tests inject faults). Not part of the public API. */
export const kOperatorIO = Symbol('flocklease.operator.io');

// ---------------------------------------------------------------------------------------------
// Reading a directory

/** `<safeID>.corrupt-<yyyymmddThhmmssmmmZ>[-n]`: outside the names a lease writes or prune removes. */
const CORRUPT_COPY = /^([A-Za-z0-9_-]{1,40}-[0-9a-f]{16})\.corrupt-(\d{8}T\d{9}Z)(?:-\d+)?$/;

interface Group {
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

type RecordRead =
  | { readonly kind: 'none' }
  | { readonly kind: 'ok'; readonly record: LeaseRecord }
  | { readonly kind: 'corrupt'; readonly problem: string; readonly error: LeaseCorruptError };

function readRecordAt(io: LeaseIO, path: string): RecordRead {
  let bytes: Uint8Array | undefined;
  try {
    bytes = io.readRecord(path);
  } catch (error) {
    if (error instanceof LeaseCorruptError) return { kind: 'corrupt', problem: error.message, error };
    throw error;
  }
  if (bytes === undefined) return { kind: 'none' };
  try {
    return { kind: 'ok', record: parseRecord(bytes) };
  } catch (error) {
    if (!(error instanceof RecordFormatError)) throw error;
    const problem = `${path}: ${error.message}`;
    return { kind: 'corrupt', problem, error: new LeaseCorruptError(`${problem}; see \`flocklease repair\``, path, { cause: error }) };
  }
}

/** Exclusive flocks by file (device and inode), from /proc/locks: never opens the files. */
class LockTable {
  readonly #holders: Map<string, number>;
  private constructor(holders: Map<string, number>) {
    this.#holders = holders;
  }

  /** undefined where the OS does not tell (no /proc/locks). */
  static read(): LockTable | undefined {
    let text: string;
    try {
      text = fs.readFileSync('/proc/locks', 'latin1');
    } catch {
      return undefined;
    }
    const holders = new Map<string, number>();
    // "1: FLOCK  ADVISORY  WRITE 4515 fe:00:2146323 0 EOF"; blocked requests read "1: -> FLOCK ...".
    const LINE = /^\d+:\s+FLOCK\s+\S+\s+WRITE\s+(\d+)\s+([0-9a-f]+):([0-9a-f]+):(\d+)\s/gm;
    for (const m of text.matchAll(LINE)) {
      holders.set(`${parseInt(m[2]!, 16)}:${parseInt(m[3]!, 16)}:${m[4]}`, Number(m[1]));
    }
    return new LockTable(holders);
  }

  /**
   * Who holds `path` exclusively: `{ locked: false }`, `{ locked: true, pid }` (pid 0 from /proc
   * means a process outside our pid namespace: locked, pid unknown), or `undefined` if it is gone.
   */
  lookup(path: string): { locked: boolean; pid: number | undefined } | undefined {
    let st: fs.BigIntStats;
    try {
      st = fs.lstatSync(path, { bigint: true });
    } catch {
      return undefined;
    }
    const dev = st.dev;
    // glibc's major()/minor() of st_dev, as /proc/locks prints them (hex).
    const major = ((dev >> 8n) & 0xfffn) | ((dev >> 32n) & 0xfffff000n);
    const minor = (dev & 0xffn) | ((dev >> 12n) & 0xffffff00n);
    const pid = this.#holders.get(`${major}:${minor}:${st.ino}`);
    if (pid === undefined) return { locked: false, pid: undefined };
    return { locked: true, pid: pid > 0 ? pid : undefined };
  }
}

/** The process holding the current generation's liveness lock of `id`, where the OS tells. */
export function holderPid(dir: string, id: string, token: bigint): number | undefined {
  return LockTable.read()?.lookup(join(resolve(dir), liveName(safeID(id), token)))?.pid;
}

/** The wait queue in a `.lock` file, read without creating or locking it. */
function readQueue(io: LeaseIO, path: string): WaitQueue {
  try {
    return parseQueue(io.readRecord(path));
  } catch {
    return parseQueue(undefined); // unreadable soft state: no queue to report
  }
}

function ioOf(options: object | undefined): LeaseIO {
  return (options as { [kOperatorIO]?: LeaseIO } | undefined)?.[kOperatorIO] ?? fileIO;
}

function clockOf(options: { clock?: (() => number) | undefined } | undefined): () => number {
  const clock = options?.clock;
  if (clock !== undefined && typeof clock !== 'function') throw new TypeError('clock must be a function returning epoch milliseconds');
  return clock ?? Date.now;
}

function checkDir(dir: unknown): string {
  if (typeof dir !== 'string' || dir === '') throw new TypeError('dir must be a non-empty string');
  const path = resolve(dir);
  const st = fs.statSync(path); // ENOENT, EACCES... as they are, with the path
  if (!st.isDirectory()) {
    throw Object.assign(new Error(`ENOTDIR: not a directory, '${path}'`), { code: 'ENOTDIR', syscall: 'stat', path });
  }
  return path;
}

function checkMs(value: unknown, what: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number') throw new TypeError(`${what} must be a number`);
  if (!Number.isFinite(value) || value < 0) throw new RangeError(`${what} must be a finite number of milliseconds ≥ 0, got ${value}`);
  return value;
}

function checkOptionalId(id: unknown): string | undefined {
  if (id === undefined) return undefined;
  checkSessionId(id);
  return id;
}

/**
 * Every lease in `dir` with its state, holder PID and queued waiters, and the leftover files.
 * Creates nothing, locks nothing exclusively, changes nothing.
 */
export function inspectLeaseDir(dir: string, options: InspectOptions = {}): Inspection {
  const path = checkDir(dir);
  const id = checkOptionalId(options.id);
  const io = ioOf(options);
  const now = clockOf(options)();
  const onlySafe = id === undefined ? undefined : safeID(id);
  const groups = listGroups(path, onlySafe);
  const table = LockTable.read();
  const leases: LeaseRow[] = [];
  const leftovers: Leftover[] = [];

  for (const g of groups.values()) {
    const read: RecordRead = g.record === undefined ? { kind: 'none' } : readRecordAt(io, join(path, g.record));
    const sessionId = (read.kind === 'ok' ? read.record.session : undefined) ?? id ?? g.safe;
    const leftover = (kind: LeftoverKind, name: string, extra: Partial<Leftover> = {}): void => {
      leftovers.push({ kind, id: sessionId, safeId: g.safe, path: join(path, name), token: undefined, locked: undefined, pid: undefined, ...extra });
    };
    const lookup = (name: string): { locked: boolean | undefined; pid: number | undefined } =>
      table?.lookup(join(path, name)) ?? { locked: table === undefined ? undefined : false, pid: undefined };

    let current: bigint | undefined; // the recorded generation
    let waiters: LeaseWaiter[] = [];
    if (read.kind !== 'none') {
      const recordPath = join(path, g.record!);
      let row: LeaseRow;
      if (read.kind === 'corrupt') {
        row = { id: sessionId, safeId: g.safe, state: 'corrupt', owner: undefined, token: undefined, expiry: undefined, locked: undefined, pid: undefined, waiters, path: recordPath, problem: read.problem };
      } else {
        const { record } = read;
        if (record.owner !== '') current = record.token; // a tombstone has no generation of its own
        const live = join(path, liveName(g.safe, record.token));
        let state: LeaseState = record.owner === '' ? 'released' : record.expiryMs <= now ? 'expired' : 'held';
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
        row = { id: sessionId, safeId: g.safe, state, owner: record.owner, token: record.token, expiry: new Date(record.expiryMs), locked, pid, waiters, path: recordPath, problem };
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
  leases.sort((a, b) => compare(a.id, b.id) || compare(a.safeId, b.safeId));
  leftovers.sort((a, b) => compare(a.path, b.path));
  return { dir: path, at: new Date(now), leases, leftovers };
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

// ---------------------------------------------------------------------------------------------
// Mutations: one id at a time, under its transition lock

/** Takes `path`'s transition flock, waiting (bounded) while another operation holds it. */
async function lockTransition(io: LeaseIO, path: string, id: string, timeoutMs: number): Promise<number> {
  const deadline = performance.now() + timeoutMs;
  for (let delay = 1; ; ) {
    const fd = io.tryLockTransition(path);
    if (typeof fd === 'number') return fd;
    if (fd === 'replaced') continue; // unlinked (pruned) while we locked it: lock the new one
    const left = deadline - performance.now();
    if (left <= 0) {
      throw new LeaseTimeoutError(
        `the transition lock ${path} was not free within ${timeoutMs} ms: another process is in (or stopped in) an operation on this id`,
        id,
      );
    }
    await sleep(Math.min(delay, left));
    delay = Math.min(delay * 2, 50);
  }
}

/**
 * Files this process creates belong to the lease directory's owner: an operator running as root
 * must not leave a record or lock file the service (a less privileged user) can no longer open.
 */
function giveToDirOwner(dir: string, paths: readonly string[]): void {
  if (process.getuid?.() !== 0) return;
  const owner = fs.statSync(dir);
  for (const path of paths) {
    try {
      const st = fs.lstatSync(path);
      if (st.uid !== owner.uid || st.gid !== owner.gid) fs.lchownSync(path, owner.uid, owner.gid);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
  }
}

/** Runs `body` under the transition lock of `id`'s lease (creating the lock file if needed). */
async function underLock<T>(io: LeaseIO, dir: string, safe: string, id: string, timeoutMs: number, body: (lockFd: number) => Promise<T>): Promise<T> {
  const lock = join(dir, lockName(safe));
  const fd = await lockTransition(io, lock, id, timeoutMs);
  try {
    giveToDirOwner(dir, [lock]);
    return await body(fd);
  } finally {
    io.unlockTransition(fd);
  }
}

function liveTokens(dir: string, safe: string): bigint[] {
  const tokens: bigint[] = [];
  for (const name of fs.readdirSync(dir)) {
    const parsed = parseLeaseFileName(name);
    if (parsed?.kind === 'live' && parsed.safe === safe) tokens.push(parsed.token);
  }
  return tokens;
}

function maxToken(tokens: Iterable<bigint>): bigint {
  let max = 0n;
  for (const t of tokens) if (t > max) max = t;
  return max;
}

/** The token of a tombstone that must beat everything `tokens` shows: the takeover rule. */
function tombstoneToken(id: string, tokens: Iterable<bigint>, now: number): bigint {
  const token = nextToken(maxToken(tokens), now);
  if (token === undefined) throw new LeaseTokenExhaustedError(`lease ${JSON.stringify(id)} has used every uint64 fencing token`, id);
  return token;
}

async function writeTombstone(io: LeaseIO, dir: string, safe: string, id: string, token: bigint, now: number, remove: readonly string[]): Promise<string[]> {
  const record = join(dir, recordName(safe));
  const result = await io.commit(dir, { record, data: formatRecord({ owner: '', token, expiryMs: now, session: id }), remove: remove.slice(0, 2) });
  giveToDirOwner(dir, [record]);
  const failed = new Set(result.removalErrors.map((e) => e.path));
  for (const path of remove.slice(2)) {
    try {
      io.removeFile(path);
    } catch {
      failed.add(path);
    }
  }
  return remove.filter((path) => !failed.has(path));
}

/**
 * Breaks the lease of `id`: writes a tombstone with a new, greater token under the transition
 * lock and removes the holder's `.live` file. A live holder keeps its descriptor until its next
 * renew, which reports the loss (`LeaseHeldError`). A corrupt record is a `LeaseCorruptError`
 * (see `repairLease`).
 */
export async function forceRelease(dir: string, id: string, options: MutationOptions = {}): Promise<ForceReleaseResult> {
  return withRecord(dir, id, options, async ({ path, safe, recordPath, read, io, now }) => {
    if (read.kind === 'corrupt') throw read.error;
    if (read.kind === 'none') return { status: 'missing', id, path: recordPath };
    const { record } = read;
    if (record.owner === '') return { status: 'already-released', id, path: recordPath, token: record.token };
    const live = join(path, liveName(safe, record.token));
    const alive = io.probeLive(live); // under the transition lock nobody is creating lock files
    const state = record.expiryMs <= now ? 'expired' : alive ? 'held' : 'crashed';
    const pid = alive ? holderPid(path, id, record.token) : undefined;
    const token = tombstoneToken(id, [record.token, ...liveTokens(path, safe)], now);
    await writeTombstone(io, path, safe, id, token, now, [live]);
    const previous = { owner: record.owner, token: record.token, expiry: new Date(record.expiryMs), state } as const;
    return { status: 'released', id, path: recordPath, previous, pid, token };
  });
}

/** What a mutation of one id works with, under that id's transition lock. */
interface RecordContext {
  readonly path: string;
  readonly safe: string;
  readonly recordPath: string;
  /** The record as read under the lock. */
  readonly read: RecordRead;
  readonly io: LeaseIO;
  readonly now: number;
}

/** Checks the arguments, takes the id's transition lock, reads its record, runs `body`. */
async function withRecord<T>(dir: string, id: string, options: MutationOptions, body: (context: RecordContext) => Promise<T>): Promise<T> {
  const path = checkDir(dir);
  checkSessionId(id);
  const timeoutMs = checkMs(options.lockTimeoutMs, 'lockTimeoutMs', DEFAULT_LOCK_TIMEOUT_MS);
  const clock = clockOf(options);
  const io = ioOf(options);
  const safe = safeID(id);
  const recordPath = join(path, recordName(safe));
  return underLock(io, path, safe, id, timeoutMs, () => body({ path, safe, recordPath, read: readRecordAt(io, recordPath), io, now: clock() }));
}

/**
 * Replaces a corrupt record of `id` (unparsable, or a symlink or other non-regular file) with a
 * tombstone whose token beats every token still visible for the id, keeping the corrupt file as
 * `<safeID>.corrupt-<time>`. A healthy or missing record is left alone.
 */
export async function repairLease(dir: string, id: string, options: MutationOptions = {}): Promise<RepairResult> {
  return withRecord(dir, id, options, async ({ path, safe, recordPath, read, io, now }) => {
    if (read.kind === 'none') return { status: 'missing', id, path: recordPath };
    if (read.kind === 'ok') return { status: 'healthy', id, path: recordPath };
    // Every token still visible: the generations' file names, and the corrupt record's own
    // token if its text still shows one.
    const lives = liveTokens(path, safe);
    const tokens = [...lives];
    const salvaged = salvageToken(recordPath);
    if (salvaged !== undefined) tokens.push(salvaged);
    const token = tombstoneToken(id, tokens, now);
    const stillHeldBy: number[] = [];
    const table = LockTable.read();
    for (const t of lives) {
      const livePath = join(path, liveName(safe, t));
      if (io.probeLive(livePath)) stillHeldBy.push(table?.lookup(livePath)?.pid ?? 0);
    }
    const copy = setAside(path, recordPath, safe, now);
    const removed = await writeTombstone(io, path, safe, id, token, now, lives.map((t) => join(path, liveName(safe, t))));
    return { status: 'repaired', id, path: recordPath, problem: read.problem, copy, token, removed, stillHeldBy: stillHeldBy.filter((p) => p > 0) };
  });
}

/** The `"token": <digits>` a damaged record may still show, if it is a uint64. */
function salvageToken(recordPath: string): bigint | undefined {
  try {
    const st = fs.lstatSync(recordPath);
    if (!st.isFile() || st.size > 64 * 1024) return undefined;
    const m = /"token"\s*:\s*(\d{1,20})/.exec(fs.readFileSync(recordPath, 'latin1'));
    if (m === null) return undefined;
    const token = BigInt(m[1]!);
    return token < 1n << 64n ? token : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Keeps the corrupt record as `<safeID>.corrupt-<time>`: a hard link (the record path is then
 * replaced atomically by the tombstone, so the id is never without a record), or, for a directory,
 * a rename. The name is one that prune leaves alone and inspect lists.
 */
function setAside(dir: string, recordPath: string, safe: string, now: number): string {
  const stamp = new Date(now).toISOString().replace(/[-:.]/g, '');
  for (let n = 1; ; n++) {
    const copy = join(dir, `${safe}.corrupt-${stamp}${n === 1 ? '' : `-${n}`}`);
    try {
      fs.linkSync(recordPath, copy); // link(2) does not follow a symlink: the link itself is kept
      return copy;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'EEXIST') continue;
      if (code !== 'EPERM' && code !== 'EISDIR') throw error;
    }
    try {
      fs.renameSync(recordPath, copy); // a directory cannot be linked, and a rename cannot replace it
      return copy;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST' && (error as NodeJS.ErrnoException).code !== 'ENOTEMPTY') throw error;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Prune

interface Probe {
  /** Is this lock file held by a process? (undefined: cannot tell) */
  locked(name: string): boolean | undefined;
}

interface Plan {
  /** Leave the whole id alone: why. */
  readonly skip?: string;
  readonly removals: PruneRemoval[];
  /** Whether the `.lock` may go too (after everything else went). */
  readonly removeLock: boolean;
}

/**
 * What to remove for one id. `record` and `queue` are as read (under the lock in a real prune);
 * `probe` tells which lock files are held.
 */
function planPrune(dir: string, g: Group, read: RecordRead, queue: WaitQueue, probe: Probe, now: number, olderThanMs: number): Plan {
  const id = (read.kind === 'ok' ? read.record.session : undefined) ?? g.safe;
  const removals: PruneRemoval[] = [];
  const add = (kind: PrunedKind, name: string, reason: string): void => {
    removals.push({ kind, id, safeId: g.safe, path: join(dir, name), reason });
  };
  if (read.kind === 'corrupt') return { skip: `corrupt record (${read.problem}); see \`flocklease repair\``, removals, removeLock: false };

  // Live waiters: the listed .wait files and the queue's (one may have queued since the listing).
  const waitNames = new Set([...g.waits.map((w) => w.name), ...queue.waiters.map((w) => waitName(g.safe, w.ticket))]);
  const liveWaiters = [...waitNames].filter((name) => probe.locked(name) !== false);
  if (liveWaiters.length > 0) {
    return { skip: `${liveWaiters.length} queued waiter${liveWaiters.length === 1 ? '' : 's'}`, removals, removeLock: false };
  }

  let keepRecord = read.kind === 'ok';
  const record = read.kind === 'ok' ? read.record : undefined;
  if (record !== undefined) {
    const age = now - record.expiryMs;
    const dead = record.owner === '' || (record.expiryMs <= now && probe.locked(liveName(g.safe, record.token)) === false);
    // A takeover without the record gets max(1, wall-clock µs): it beats this token only if the
    // clock is already past it (a token issued this millisecond, or by a Go process that counts +1, may not be).
    const beaten = record.token < BigInt(Math.floor(now * 1000));
    if (dead && age >= olderThanMs && beaten) {
      keepRecord = false;
      add('record', g.record!, record.owner === '' ? `released ${ago(age)}` : `expired ${ago(age)}, holder gone`);
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
  if (removeLock && g.lock !== undefined) add('lock', g.lock, record === undefined ? 'no record' : 'its record was pruned');
  return { removals, removeLock };
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
  const path = checkDir(dir);
  const id = checkOptionalId(options.id);
  const olderThanMs = checkMs(options.olderThanMs, 'olderThanMs', DEFAULT_PRUNE_AGE_MS);
  const timeoutMs = checkMs(options.lockTimeoutMs, 'lockTimeoutMs', DEFAULT_LOCK_TIMEOUT_MS);
  const dryRun = options.dryRun === true;
  const clock = clockOf(options);
  const io = ioOf(options);
  const groups = listGroups(path, id === undefined ? undefined : safeID(id));
  const removed: PruneRemoval[] = [];
  const skipped: PruneSkip[] = [];
  const errors: Array<{ path: string; error: Error }> = [];

  for (const g of [...groups.values()].sort((a, b) => compare(a.safe, b.safe))) {
    const name = (read: RecordRead): string => (read.kind === 'ok' ? read.record.session : undefined) ?? id ?? g.safe;
    if (dryRun) {
      // No lock (taking it could create a file): decide from what is there now, probing nothing
      // but the recorded generation (see inspect).
      const read: RecordRead = g.record === undefined ? { kind: 'none' } : readRecordAt(io, join(path, g.record));
      const queue = g.lock === undefined ? parseQueue(undefined) : readQueue(io, join(path, g.lock));
      const plan = planPrune(path, g, read, queue, observerProbe(io, path, g, read), clock(), olderThanMs);
      if (plan.skip !== undefined) skipped.push({ id: name(read), safeId: g.safe, reason: plan.skip });
      else removed.push(...plan.removals);
      continue;
    }
    if (g.record === undefined && g.lock === undefined && g.lives.length + g.waits.length + g.temps.length === 0) continue; // only corrupt copies
    try {
      await underLock(io, path, g.safe, id ?? g.safe, timeoutMs, async (lockFd) => {
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
