/**
 * The `<safeID>.lease.json` record, byte-compatible with the Go original:
 * `{"owner": string, "token": uint64, "expiry": RFC 3339}`, plus our optional `"session"` (the raw
 * id, for the CLI). Readers accept records without it and ignore unknown fields.
 */
import { MAX_TOKEN } from '../port/token.js';
import { JsonNumber, parseJson } from './json.js';

export interface LeaseRecord {
  /** "" marks a tombstone (released). */
  readonly owner: string;
  readonly token: bigint;
  /** The expiry, truncated to the millisecond (for display and for the ms this port writes). */
  readonly expiryMs: number;
  /** Nanoseconds past `expiryMs` (1–999 999), when the writer recorded a finer instant (Go writes
   * up to nine fractional digits); absent otherwise. See `expiresAtMs`. */
  readonly expiryNanos?: number | undefined;
  /** The raw session id, when the writer recorded it. */
  readonly session?: string | undefined;
}

/** Why a record could not be read; the caller wraps it into a LeaseCorruptError naming the file. */
export class RecordFormatError extends Error {}

const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
const UINT = /^(?:0|[1-9]\d*)$/;
const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:[Zz]|([+-])(\d{2}):(\d{2}))$/;

export function parseRecord(bytes: Uint8Array): LeaseRecord {
  let text: string;
  try {
    text = UTF8.decode(bytes);
  } catch {
    throw new RecordFormatError('record is not valid UTF-8');
  }
  let json;
  try {
    json = parseJson(text);
  } catch (error) {
    throw new RecordFormatError(`record is not valid JSON: ${(error as Error).message}`);
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json) || json instanceof JsonNumber) {
    throw new RecordFormatError('record is not a JSON object');
  }
  const { owner, token, expiry, session } = json;
  if (typeof owner !== 'string') throw new RecordFormatError('record "owner" is not a string');
  if (!(token instanceof JsonNumber) || !UINT.test(token.text)) {
    throw new RecordFormatError('record "token" is not a non-negative integer');
  }
  const tokenValue = BigInt(token.text);
  if (tokenValue > MAX_TOKEN) throw new RecordFormatError('record "token" does not fit in 64 bits');
  const instant = typeof expiry === 'string' ? parseRfc3339Instant(expiry) : undefined;
  if (instant === undefined) throw new RecordFormatError('record "expiry" is not an RFC 3339 time');
  const sessionText = typeof session === 'string' ? session : undefined;
  if (instant.nanos === 0) return { owner, token: tokenValue, expiryMs: instant.ms, session: sessionText };
  return { owner, token: tokenValue, expiryMs: instant.ms, expiryNanos: instant.nanos, session: sessionText };
}

/**
 * The first whole millisecond at which the lease is expired: its recorded instant rounded up, so a
 * lease is never deemed expired before that instant (a Go holder's expiry has nanoseconds).
 */
export function expiresAtMs(record: LeaseRecord): number {
  return record.expiryNanos === undefined ? record.expiryMs : record.expiryMs + 1;
}

/** Is the lease past its recorded expiry at `nowMs`? The one home of that comparison. */
export function isExpired(record: LeaseRecord, nowMs: number): boolean {
  return expiresAtMs(record) <= nowMs;
}

export function formatRecord(record: LeaseRecord): string {
  const session = record.session === undefined ? '' : `,"session":${JSON.stringify(record.session)}`;
  return `{"owner":${JSON.stringify(record.owner)},"token":${record.token},"expiry":"${formatExpiry(record)}"${session}}`;
}

/** UTC with milliseconds, as this port always wrote; a read instant finer than that (a Go
 * record's) keeps its nanoseconds, trailing zeros trimmed as Go does. */
function formatExpiry(record: LeaseRecord): string {
  const iso = new Date(record.expiryMs).toISOString();
  if (record.expiryNanos === undefined) return iso;
  const nanos = String(record.expiryNanos).padStart(6, '0').replace(/0+$/, '');
  return `${iso.slice(0, -1)}${nanos}Z`;
}

/** Epoch ms of an RFC 3339 time in any form Go writes (nanoseconds, zone offsets), truncated to
 * the millisecond; `undefined` if it is not one. */
export function parseRfc3339(text: string): number | undefined {
  return parseRfc3339Instant(text)?.ms;
}

/** An RFC 3339 time exactly: epoch ms (truncated) and the nanoseconds past it (digits beyond the
 * ninth cannot change the instant by a nanosecond, and are dropped). */
export function parseRfc3339Instant(text: string): { ms: number; nanos: number } | undefined {
  const m = RFC3339.exec(text);
  if (m === null) return undefined;
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const daysInMonth = [31, isLeap(year) ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1];
  if (daysInMonth === undefined || day < 1 || day > daysInMonth) return undefined;
  if (hour > 23 || minute > 59 || second > 59) return undefined;
  let offsetMinutes = 0;
  if (m[8] !== undefined) {
    const offsetHours = Number(m[9]);
    const offsetMins = Number(m[10]);
    if (offsetHours > 23 || offsetMins > 59) return undefined;
    offsetMinutes = (m[8] === '-' ? -1 : 1) * (offsetHours * 60 + offsetMins);
  }
  const fraction = m[7] === undefined ? '' : m[7].slice(0, 9).padEnd(9, '0');
  const millis = fraction === '' ? 0 : Number(fraction.slice(0, 3));
  const nanos = fraction === '' ? 0 : Number(fraction.slice(3));
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day); // setUTCFullYear, unlike Date.UTC, keeps years 0–99
  date.setUTCHours(hour, minute, second, millis);
  return { ms: date.getTime() - offsetMinutes * 60_000, nanos };
}

function isLeap(year: number): boolean {
  return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
}
