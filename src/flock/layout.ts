/**
 * File names in a lease directory, compatible with the Go original. Per session id:
 *   <safeID>.lock            transition lock, flocked for one operation at a time
 *   <safeID>.<token>.live    liveness lock of one generation, flocked for its whole life
 *   <safeID>.lease.json      the record, replaced atomically
 *   <safeID>.<ticket>.wait   liveness lock of one queued waiter (ours; the Go original has none)
 */
import { createHash } from 'node:crypto';

const KEEP = /^[A-Za-z0-9_-]$/;
const PREFIX_LENGTH = 40;
const CACHE_LIMIT = 4096;
const cache = new Map<string, string>();

/**
 * A readable prefix (the id's code points, `[A-Za-z0-9_-]` kept, anything else `_`, at most 40)
 * + `-` + the first 8 bytes of SHA-256(UTF-8 id) in hex: distinct ids never share files, and
 * `../../etc/passwd` is just a name.
 */
export function safeID(id: string): string {
  let safe = cache.get(id);
  if (safe !== undefined) return safe;
  let prefix = '';
  for (const codePoint of id) {
    if (prefix.length === PREFIX_LENGTH) break;
    prefix += KEEP.test(codePoint) ? codePoint : '_';
  }
  safe = `${prefix || 'id'}-${createHash('sha256').update(id, 'utf8').digest('hex').slice(0, 16)}`;
  if (cache.size >= CACHE_LIMIT) cache.clear(); // ids are cheap to rehash; keep memory bounded
  cache.set(id, safe);
  return safe;
}

/** `dir/name` for a resolved `dir` (absolute, normalized) and a bare file name: what path.join
 * returns, without its normalizing pass (a third of a µs, several times per operation). */
const inDir = (dir: string, name: string): string => (dir.endsWith('/') ? dir + name : `${dir}/${name}`);

export const lockName = (safe: string): string => `${safe}.lock`;
export const recordName = (safe: string): string => `${safe}.lease.json`;
const LIVE_SUFFIX = '.live';
const WAIT_SUFFIX = '.wait';
/** A `.live` or `.wait` name is the id's prefix, a number in decimal (the generation's token, the
 * waiter's ticket), and the suffix; `prefix` may have the directory in front. */
const numberedPrefix = (safe: string): string => `${safe}.`;
const numbered = (prefix: string, n: bigint | number, suffix: string): string => `${prefix}${n}${suffix}`;
export const liveName = (safe: string, token: bigint): string => numbered(numberedPrefix(safe), token, LIVE_SUFFIX);
export const waitName = (safe: string, ticket: number): string => numbered(numberedPrefix(safe), ticket, WAIT_SUFFIX);

/** The paths of one id's files in a lease directory. */
export interface IdPaths {
  readonly safe: string;
  readonly lock: string;
  readonly record: string;
  /** A `.live` or `.wait` path is this, a number (token or ticket), then its suffix. */
  readonly prefix: string;
}

/** A lease directory's paths, kept for the id asked for last: a process working one id asks for the
 * same few at every step, and building them (and converting them for the addon) each time would
 * allocate at every step. */
export class DirPaths {
  #last: IdPaths | undefined;

  constructor(readonly dir: string) {}

  of(safe: string): IdPaths {
    const last = this.#last;
    if (last?.safe === safe) return last;
    const { dir } = this;
    return (this.#last = {
      safe,
      lock: inDir(dir, lockName(safe)),
      record: inDir(dir, recordName(safe)),
      prefix: inDir(dir, numberedPrefix(safe)),
    });
  }

  live(safe: string, token: bigint): string {
    return numbered(this.of(safe).prefix, token, LIVE_SUFFIX);
  }

  wait(safe: string, ticket: number): string {
    return numbered(this.of(safe).prefix, ticket, WAIT_SUFFIX);
  }
}

/** What a directory entry is, for the operator tools; `undefined` for a name we never write. */
export type LeaseFileName =
  | { readonly kind: 'lock' | 'record'; readonly safe: string }
  | { readonly kind: 'live'; readonly safe: string; readonly token: bigint }
  | { readonly kind: 'wait'; readonly safe: string; readonly ticket: number }
  | { readonly kind: 'temp'; readonly safe: string };

const NAME =
  /^([A-Za-z0-9_-]{1,40}-[0-9a-f]{16})\.(?:(lock)|(lease\.json)|(0|[1-9]\d{0,19})\.live|(0|[1-9]\d{0,15})\.wait|lease\.json\.([A-Za-z0-9._-]+))$/;

export function parseLeaseFileName(name: string): LeaseFileName | undefined {
  const m = NAME.exec(name);
  if (m === null) return undefined;
  const safe = m[1]!;
  if (m[2] !== undefined) return { kind: 'lock', safe };
  if (m[3] !== undefined) return { kind: 'record', safe };
  if (m[4] !== undefined) return { kind: 'live', safe, token: BigInt(m[4]) };
  if (m[5] !== undefined) return { kind: 'wait', safe, ticket: Number(m[5]) };
  return { kind: 'temp', safe };
}
