/**
 * The `<safeID>.lease.json` record, byte-compatible with the Go original:
 * `{"owner": string, "token": uint64, "expiry": RFC 3339}`, plus our optional `"session"` (the raw
 * id, for the CLI). Readers accept records without it and ignore unknown fields.
 */
import { MAX_TOKEN } from '../kernel/token.js';
import type { LeaseHolder } from '../port/errors.js';
import type { LeaseGrant } from '../port/types.js';
import { MAX_EXPIRY_MS } from '../port/validate.js';
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

/**
 * The exact layout this port writes (and the Go original, but for its expiry's form): read with
 * one regex, the strings by JSON.parse. Anything else — other key orders, spaces, unknown fields,
 * and every malformed record — goes to the general reader, which also words the errors.
 */
const STRING = String.raw`"(?:[^"\\\u0000-\u001f]|\\[^u]|\\u[0-9a-fA-F]{4})*"`;
const OWN_LAYOUT = new RegExp(
  String.raw`^\{"owner":(${STRING}),"token":(0|[1-9]\d{0,19}),` +
    String.raw`"expiry":"([0-9Tt:.+\-Zz]{20,40})"(?:,"session":(${STRING}))?\}$`,
);

/** A record from its bytes, or from its text when it was all ASCII (see LeaseIO.readRecord). */
export function parseRecord(content: string | Uint8Array): LeaseRecord {
  let text: string;
  if (typeof content === 'string') text = content;
  else {
    try {
      text = UTF8.decode(content);
    } catch {
      throw new RecordFormatError('record is not valid UTF-8');
    }
  }
  return parseOwnLayout(text) ?? parseAnyLayout(text);
}

function parseOwnLayout(text: string): LeaseRecord | undefined {
  const m = OWN_LAYOUT.exec(text);
  if (m === null) return undefined;
  const tokenText = m[2]!;
  const token = BigInt(tokenText);
  const instant = parseRfc3339Instant(m[3]!);
  // Out of range, or not a time: the general reader says why.
  if ((tokenText.length === 20 && token > MAX_TOKEN) || instant === undefined) return undefined;
  let owner: string;
  let session: string | undefined;
  try {
    owner = jsonString(m[1]!);
    session = m[4] === undefined ? undefined : jsonString(m[4]);
  } catch {
    return undefined; // a bad escape
  }
  if (instant.nanos === 0) return { owner, token, expiryMs: instant.ms, session };
  return { owner, token, expiryMs: instant.ms, expiryNanos: instant.nanos, session };
}

/** A JSON string that STRING matched: without a backslash it is its text between the quotes (the
 * pattern already ruled out raw control characters and bare quotes), which skips JSON.parse on the
 * woken waiter's cold path. */
function jsonString(quoted: string): string {
  return quoted.includes('\\') ? (JSON.parse(quoted) as string) : quoted.slice(1, -1);
}

function parseAnyLayout(text: string): LeaseRecord {
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

/** Who the record names, as errors and events report it. */
export function holderOf(record: LeaseRecord): LeaseHolder {
  return Object.freeze({ owner: record.owner, token: record.token, expiry: new Date(record.expiryMs) });
}

/** The grant a generation gives its holder, as the Lease returns and announces it. */
export function grantOf(sessionId: string, owner: string, token: bigint, expiryMs: number): LeaseGrant {
  return Object.freeze({ sessionId, owner, token, expiry: new Date(expiryMs) });
}

/** Is the lease past its recorded expiry at `nowMs`? The one home of that comparison. */
export function isExpired(record: LeaseRecord, nowMs: number): boolean {
  return expiresAtMs(record) <= nowMs;
}

/** The layout this port writes, for one owner and session: a record is `before`, its token in
 * decimal, `between`, its expiry, `after` (which begins with the expiry's closing quote). */
interface RecordLayout {
  readonly before: string;
  readonly between: string;
  readonly after: string;
}

/** Layouts by owner, each for the session it was made for: a process writes and waits for the few
 * owners of the ids it works on, again and again (a release writes its waiter's). Bounded. */
const layouts = new Map<string, { readonly session: string | undefined; readonly layout: RecordLayout }>();
const LAYOUTS_KEPT = 256;

function recordLayout(owner: string, session: string | undefined): RecordLayout {
  const known = layouts.get(owner);
  if (known !== undefined && known.session === session) return known.layout;
  const sessionField = session === undefined ? '' : `,"session":${JSON.stringify(session)}`;
  const layout = {
    before: `{"owner":${JSON.stringify(owner)},"token":`,
    between: ',"expiry":"',
    after: `"${sessionField}}`,
  };
  if (layouts.size >= LAYOUTS_KEPT) layouts.clear();
  layouts.set(owner, { session, layout });
  return layout;
}

export function formatRecord(record: LeaseRecord): string {
  const { before, between, after } = recordLayout(record.owner, record.session);
  return `${before}${record.token}${between}${formatExpiry(record)}${after}`;
}

/** UTC with milliseconds, as this port always wrote; a read instant finer than that (a Go
 * record's) keeps its nanoseconds, trailing zeros trimmed as Go does. */
function formatExpiry(record: LeaseRecord): string {
  const iso = formatUtcMs(record.expiryMs);
  if (record.expiryNanos === undefined) return iso;
  const nanos = String(record.expiryNanos).padStart(6, '0').replace(/0+$/, '');
  return `${iso.slice(0, -1)}${nanos}Z`;
}

const TWO_DIGITS = Array.from({ length: 100 }, (_, i) => String(i).padStart(2, '0'));
const MS_PER_DAY = 86_400_000;

/**
 * `new Date(ms).toISOString()`, by arithmetic: it runs for every record written, and the Date
 * (allocation and its formatter) was most of formatRecord's time. Years 1970–9999 (every expiry
 * this port writes from a sane clock); anything else goes to Date.
 */
export function formatUtcMs(ms: number): string {
  if (!(ms >= 0 && ms <= MAX_EXPIRY_MS)) return new Date(ms).toISOString();
  const whole = Math.trunc(ms);
  const days = Math.floor(whole / MS_PER_DAY);
  let rest = whole - days * MS_PER_DAY;
  const { year, month, day } = civilFromDays(days);
  const hour = Math.floor(rest / 3_600_000);
  rest -= hour * 3_600_000;
  const minute = Math.floor(rest / 60_000);
  rest -= minute * 60_000;
  const second = Math.floor(rest / 1_000);
  const millis = rest - second * 1_000;
  const frac = millis < 10 ? `00${millis}` : millis < 100 ? `0${millis}` : `${millis}`;
  return `${year}-${TWO_DIGITS[month]}-${TWO_DIGITS[day]}T${TWO_DIGITS[hour]}:${TWO_DIGITS[minute]}:${TWO_DIGITS[second]}.${frac}Z`;
}

/** The proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's civil_from_days). */
function civilFromDays(days: number): { year: number; month: number; day: number } {
  const z = days + 719_468;
  const era = Math.floor(z / 146_097);
  const dayOfEra = z - era * 146_097;
  const yearOfEra = Math.floor(
    (dayOfEra - Math.floor(dayOfEra / 1_460) + Math.floor(dayOfEra / 36_524) - Math.floor(dayOfEra / 146_096)) / 365,
  );
  const dayOfYear = dayOfEra - (365 * yearOfEra + Math.floor(yearOfEra / 4) - Math.floor(yearOfEra / 100));
  const mp = Math.floor((5 * dayOfYear + 2) / 153);
  const day = dayOfYear - Math.floor((153 * mp + 2) / 5) + 1;
  const month = mp < 10 ? mp + 3 : mp - 9;
  return { year: yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day };
}

/** Epoch ms of an RFC 3339 time in any form Go writes (nanoseconds, zone offsets), truncated to
 * the millisecond; `undefined` if it is not one. */
export function parseRfc3339(text: string): number | undefined {
  return parseRfc3339Instant(text)?.ms;
}

/** An RFC 3339 time exactly: epoch ms (truncated) and the nanoseconds past it (digits beyond the
 * ninth cannot change the instant by a nanosecond, and are dropped). Read by char codes: it runs
 * for every record read, and a regex with a Date per call was a measurable part of a cycle. */
export function parseRfc3339Instant(text: string): { ms: number; nanos: number } | undefined {
  const n = text.length;
  if (n < 20) return undefined;
  const year = digits(text, 0, 4);
  const month = digits(text, 5, 2);
  const day = digits(text, 8, 2);
  const hour = digits(text, 11, 2);
  const minute = digits(text, 14, 2);
  const second = digits(text, 17, 2);
  const t = text.charCodeAt(10);
  if (text.charCodeAt(4) !== 0x2d || text.charCodeAt(7) !== 0x2d || (t !== 0x54 && t !== 0x74)) return undefined;
  if (text.charCodeAt(13) !== 0x3a || text.charCodeAt(16) !== 0x3a) return undefined;
  if ((year | month | day | hour | minute | second) < 0) return undefined;
  if (month < 1 || month > 12 || day < 1 || day > daysIn(year, month)) return undefined;
  if (hour > 23 || minute > 59 || second > 59) return undefined;
  let at = 19;
  let millis = 0;
  let nanos = 0;
  if (text.charCodeAt(at) === 0x2e) {
    const from = ++at;
    while (at < n && isDigit(text.charCodeAt(at))) {
      const d = text.charCodeAt(at) - 0x30;
      const place = at - from;
      if (place < 3) millis = millis * 10 + d;
      else if (place < 9) nanos = nanos * 10 + d;
      at++;
    }
    const count = at - from;
    if (count === 0) return undefined;
    for (let place = count; place < 3; place++) millis *= 10;
    for (let place = Math.max(count, 3); place < 9; place++) nanos *= 10;
  }
  let offsetMinutes = 0;
  const zone = text.charCodeAt(at);
  if (zone === 0x5a || zone === 0x7a) {
    if (at + 1 !== n) return undefined;
  } else if (zone === 0x2b || zone === 0x2d) {
    if (at + 6 !== n || text.charCodeAt(at + 3) !== 0x3a) return undefined;
    const offsetHours = digits(text, at + 1, 2);
    const offsetMins = digits(text, at + 4, 2);
    if (offsetHours < 0 || offsetMins < 0 || offsetHours > 23 || offsetMins > 59) return undefined;
    offsetMinutes = (zone === 0x2d ? -1 : 1) * (offsetHours * 60 + offsetMins);
  } else {
    return undefined;
  }
  const seconds = daysFromCivil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second - offsetMinutes * 60;
  return { ms: seconds * 1_000 + millis, nanos };
}

/** The decimal number in `count` digits at `at`, or -1. */
function digits(text: string, at: number, count: number): number {
  let value = 0;
  for (let i = at; i < at + count; i++) {
    const c = text.charCodeAt(i);
    if (!isDigit(c)) return -1;
    value = value * 10 + (c - 0x30);
  }
  return value;
}

function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39;
}

function daysIn(year: number, month: number): number {
  return month === 2 ? (isLeap(year) ? 29 : 28) : month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31;
}

/** Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil). */
function daysFromCivil(year: number, month: number, day: number): number {
  const y = month <= 2 ? year - 1 : year;
  const era = Math.floor(y / 400);
  const yearOfEra = y - era * 400;
  const dayOfYear = Math.floor((153 * (month + (month > 2 ? -3 : 9)) + 2) / 5) + day - 1;
  const dayOfEra = yearOfEra * 365 + Math.floor(yearOfEra / 4) - Math.floor(yearOfEra / 100) + dayOfYear;
  return era * 146_097 + dayOfEra - 719_468;
}

function isLeap(year: number): boolean {
  return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
}
