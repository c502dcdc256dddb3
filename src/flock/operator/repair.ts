// Mutations of one id's record: repair (replace a corrupt record) and force-release (break a lease).
import fs from 'node:fs';
import { join } from 'node:path';
import { LeaseTokenExhaustedError } from '../../port/errors.js';
import { nextToken } from '../../kernel/token.js';
import { checkSessionId } from '../../port/validate.js';
import type { LeaseIO } from '../io.js';
import { liveName, parseLeaseFileName, recordName, safeID } from '../layout.js';
import { formatRecord, isExpired } from '../record.js';
import { holderPid, LockTable } from './proc-locks.js';
import { checkDir, checkMs, clockOf, ioOf, readRecordAt, type RecordRead } from './scan.js';
import { giveToDirOwner, underLock } from './transition.js';
import { DEFAULT_LOCK_TIMEOUT_MS, type ForceReleaseResult, type MutationOptions, type RepairResult } from './types.js';

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
  if (token === undefined)
    throw new LeaseTokenExhaustedError(`lease ${JSON.stringify(id)} has used every uint64 fencing token`, id);
  return token;
}

async function writeTombstone(
  io: LeaseIO,
  dir: string,
  safe: string,
  id: string,
  token: bigint,
  now: number,
  remove: readonly string[],
): Promise<string[]> {
  const record = join(dir, recordName(safe));
  const result = await io.commit(dir, {
    record,
    data: formatRecord({ owner: '', token, expiryMs: now, session: id }),
    remove: remove.slice(0, 2),
  });
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
export async function forceRelease(
  dir: string,
  id: string,
  options: MutationOptions = {},
): Promise<ForceReleaseResult> {
  return withRecord(dir, id, options, async ({ path, safe, recordPath, read, io, now }) => {
    if (read.kind === 'corrupt') throw read.error;
    if (read.kind === 'none') return { status: 'missing', id, path: recordPath };
    const { record } = read;
    if (record.owner === '') return { status: 'already-released', id, path: recordPath, token: record.token };
    const live = join(path, liveName(safe, record.token));
    const alive = io.probeLive(live); // under the transition lock nobody is creating lock files
    const state = isExpired(record, now) ? 'expired' : alive ? 'held' : 'crashed';
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
async function withRecord<T>(
  dir: string,
  id: string,
  options: MutationOptions,
  body: (context: RecordContext) => Promise<T>,
): Promise<T> {
  const path = checkDir(dir);
  checkSessionId(id);
  const timeoutMs = checkMs(options.lockTimeoutMs, 'lockTimeoutMs', DEFAULT_LOCK_TIMEOUT_MS);
  const clock = clockOf(options);
  const io = ioOf(options);
  const safe = safeID(id);
  const recordPath = join(path, recordName(safe));
  return underLock(io, path, safe, id, timeoutMs, () =>
    body({ path, safe, recordPath, read: readRecordAt(io, recordPath), io, now: clock() }),
  );
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
    const removed = await writeTombstone(
      io,
      path,
      safe,
      id,
      token,
      now,
      lives.map((t) => join(path, liveName(safe, t))),
    );
    return {
      status: 'repaired',
      id,
      path: recordPath,
      problem: read.problem,
      copy,
      token,
      removed,
      stillHeldBy: stillHeldBy.filter((p) => p > 0),
    };
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
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST' && (error as NodeJS.ErrnoException).code !== 'ENOTEMPTY')
        throw error;
    }
  }
}
