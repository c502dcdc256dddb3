/**
 * The wait queue of one id, kept as the content of its `.lock` file (which the Go original leaves
 * empty and never reads) and changed only under that file's flock. Each queued waiter holds its
 * own `<safeID>.<ticket>.wait` file flocked, so a dead waiter is seen at once and skipped, and a
 * release can hand the lease straight to the front waiter (see Lease.release).
 * Soft state: not fsynced; losing it costs ordering, never safety.
 */

export interface QueuedWaiter {
  /** Arrival order; also names the waiter's `.wait` file. */
  readonly ticket: number;
  /** Who the lease is handed to. */
  readonly owner: string;
  /** The waiter's lease length, for the expiry of a handed-over lease. */
  readonly ttlMs: number;
}

export interface WaitQueue {
  readonly waiters: QueuedWaiter[];
  /** When the lease was first seen free while reserved for the front waiter (0: not yet). */
  freeSince: number;
}

/** Beyond this the queue refuses newcomers (they still wait, unqueued): the file stays small. */
export const MAX_QUEUE_TEXT = 48 * 1024;

const UTF8 = new TextDecoder();

/**
 * The queue in the `.lock` file's content: its text when it is all ASCII (see LeaseIO.readLockData),
 * else its bytes. Read with a scanner for the one layout formatQueue writes (it runs under the
 * transition lock twice in every contended cycle, where JSON.parse, its interned keys and the
 * per-entry checks would be most of a transition's queue work);
 * anything else goes to the general reader. Unreadable soft state is an empty queue.
 */
export function parseQueue(content: string | Uint8Array | undefined): WaitQueue {
  const text = queueText(content);
  return text === '' ? { waiters: [], freeSince: 0 } : (parseOwnQueue(text) ?? parseAnyQueue(text));
}

/** The queue's text as read ('' for none): what formatQueue wrote, if it was unchanged since. */
export function queueText(content: string | Uint8Array | undefined): string {
  return content === undefined ? '' : typeof content === 'string' ? content : UTF8.decode(content);
}

function parseAnyQueue(text: string): WaitQueue {
  try {
    const value = JSON.parse(text) as { waiters?: unknown; freeSince?: unknown };
    const waiters = Array.isArray(value.waiters) ? value.waiters.flatMap(toWaiter) : [];
    return {
      waiters,
      freeSince: typeof value.freeSince === 'number' && Number.isFinite(value.freeSince) ? value.freeSince : 0,
    };
  } catch {
    return { waiters: [], freeSince: 0 }; // unreadable soft state: start over (waiters re-enqueue)
  }
}

function toWaiter(value: unknown): QueuedWaiter[] {
  const { t, o, ttl } = (value ?? {}) as { t?: unknown; o?: unknown; ttl?: unknown };
  const valid =
    Number.isSafeInteger(t) &&
    (t as number) >= 0 &&
    typeof o === 'string' &&
    o !== '' &&
    typeof ttl === 'number' &&
    ttl > 0;
  return valid ? [{ ticket: t as number, owner: o, ttlMs: ttl }] : [];
}

const HEAD = '{"waiters":[';
const TICKET = '{"t":';
const OWNER = ',"o":';
const TTL = ',"ttl":';
const TAIL = '],"freeSince":';

/**
 * What a text in formatQueue's own layout holds, found by scanning it without building its entries:
 * enough for the two changes every contended cycle makes to the queue, as text (a release hands the
 * lease to the front waiter, a refused waiting acquire joins at the back), without building every
 * entry and formatting them all again, twice a cycle, which would be much of what a contended cycle
 * allocates.
 */
export interface QueueShape {
  readonly count: number;
  /** Where the first entry ends (just past its closing brace), when there is one. */
  readonly frontEnd: number;
  /** Where the entries end: the index of the `],"freeSince":` tail. */
  readonly tailAt: number;
  /** The last entry's ticket, and the largest (0 when there is none). */
  readonly lastTicket: number;
  readonly maxTicket: number;
  readonly freeSince: number;
}

const EMPTY_SHAPE: QueueShape = { count: 0, frontEnd: 0, tailAt: 0, lastTicket: 0, maxTicket: 0, freeSince: 0 };

/** One entry as readEntry found it; reused, so that a scan allocates nothing per entry. */
const entry = { ticket: 0, ttlMs: 0, ownerFrom: 0, ownerEnd: 0, escaped: false };

/**
 * The shape of `text` ('' for the empty queue) when it is formatQueue's own layout, every entry
 * valid, each pushed to `into` if given; `undefined` for anything else (the general reader decides,
 * so both readers agree on every text this one accepts).
 */
export function scanOwnQueue(text: string, into?: QueuedWaiter[]): QueueShape | undefined {
  if (text === '') return EMPTY_SHAPE;
  if (!text.startsWith(HEAD)) return undefined;
  let at = HEAD.length;
  let count = 0;
  let frontEnd = at;
  let lastTicket = 0;
  let maxTicket = 0;
  if (text.charCodeAt(at) !== 0x5d) {
    for (;;) {
      at = readEntry(text, at);
      if (at < 0) return undefined;
      if (into !== undefined) {
        const waiter = waiterOf(text);
        if (waiter === undefined) return undefined;
        into.push(waiter);
      }
      if (count++ === 0) frontEnd = at;
      lastTicket = entry.ticket;
      if (lastTicket > maxTicket) maxTicket = lastTicket;
      if (text.charCodeAt(at) !== 0x2c) break;
      at++;
    }
  }
  if (!text.startsWith(TAIL, at)) return undefined;
  const tailAt = at;
  const freeEnd = decimalEnd(text, (at += TAIL.length), true);
  if (freeEnd < 0 || text.charCodeAt(freeEnd) !== 0x7d || freeEnd + 1 !== text.length) return undefined;
  const freeSince = decimalValue(text, at, freeEnd);
  return Number.isFinite(freeSince) ? { count, frontEnd, tailAt, lastTicket, maxTicket, freeSince } : undefined;
}

/** Reads the entry at `at` into `entry`: the index past it, or -1 if it is not a valid entry. */
function readEntry(text: string, at: number): number {
  if (!text.startsWith(TICKET, at)) return -1;
  const ticketEnd = decimalEnd(text, (at += TICKET.length), false);
  if (ticketEnd < 0) return -1;
  const ticket = decimalValue(text, at, ticketEnd);
  if (!Number.isSafeInteger(ticket) || !text.startsWith(OWNER, ticketEnd)) return -1;
  // The owner: a JSON string with no raw control character, not empty.
  const from = ticketEnd + OWNER.length;
  if (text.charCodeAt(from) !== 0x22) return -1;
  let end = from + 1;
  let escaped = false;
  for (let c = text.charCodeAt(end); c !== 0x22; c = text.charCodeAt(end)) {
    if (!(c >= 0x20)) return -1; // a raw control character, or the text's end (NaN)
    if (c === 0x5c) {
      escaped = true;
      end = escapeEnd(text, end);
      if (end < 0) return -1;
    } else end++;
  }
  if (end === from + 1 || !text.startsWith(TTL, end + 1)) return -1;
  const ttlFrom = end + 1 + TTL.length;
  const ttlEnd = decimalEnd(text, ttlFrom, true);
  if (ttlEnd < 0 || text.charCodeAt(ttlEnd) !== 0x7d) return -1;
  const ttlMs = decimalValue(text, ttlFrom, ttlEnd);
  if (!(ttlMs > 0)) return -1;
  entry.ticket = ticket;
  entry.ttlMs = ttlMs;
  entry.ownerFrom = from;
  entry.ownerEnd = end;
  entry.escaped = escaped;
  return ttlEnd + 1;
}

/** The waiter of the entry readEntry just read; `undefined` if JSON would not read its owner's
 * escapes. */
function waiterOf(text: string): QueuedWaiter | undefined {
  const { ticket, ttlMs, ownerFrom, ownerEnd, escaped } = entry;
  let owner: string;
  try {
    owner = escaped ? (JSON.parse(text.slice(ownerFrom, ownerEnd + 1)) as string) : text.slice(ownerFrom + 1, ownerEnd);
  } catch {
    return undefined;
  }
  return { ticket, owner, ttlMs };
}

/** Past the JSON escape whose backslash is at `at`; -1 if it is not one. */
function escapeEnd(text: string, at: number): number {
  const c = text.charCodeAt(at + 1);
  if (c === 0x75) {
    for (let i = at + 2; i < at + 6; i++) if (!isHexDigit(text.charCodeAt(i))) return -1;
    return at + 6;
  }
  // " \ / b f n r t
  return c === 0x22 || c === 0x5c || c === 0x2f || c === 0x62 || c === 0x66 || c === 0x6e || c === 0x72 || c === 0x74
    ? at + 2
    : -1;
}

/** formatQueue's own layout, every entry valid; `undefined` for anything else. */
function parseOwnQueue(text: string): WaitQueue | undefined {
  const waiters: QueuedWaiter[] = [];
  const shape = scanOwnQueue(text, waiters);
  return shape === undefined ? undefined : { waiters, freeSince: shape.freeSince };
}

/** The front waiter of a text whose shape has an entry. */
export function frontWaiter(text: string): QueuedWaiter {
  readEntry(text, HEAD.length);
  return waiterOf(text)!;
}

/** `text` (of `shape`, with an entry) without its front waiter, and with `freeSince`. */
export function withoutFront(text: string, shape: QueueShape, freeSince: number): string {
  if (shape.count === 1) return ''; // as formatQueue writes an empty queue
  return `${HEAD}${text.slice(shape.frontEnd + 1, shape.tailAt)}${TAIL}${freeSince}}`;
}

/** `text` (of `shape`) with `waiter` joined at the back. */
export function withWaiter(text: string, shape: QueueShape, waiter: QueuedWaiter): string {
  if (text === '') return formatQueue({ waiters: [waiter], freeSince: 0 });
  const at = shape.tailAt;
  return `${text.slice(0, at)}${shape.count === 0 ? '' : ','}${entryText(waiter)}${text.slice(at)}`;
}

/** The value of the plain decimal number from `at` to `end` (see decimalEnd), exactly as Number()
 * reads it: digit by digit, which is exact for an integer up to Number.MAX_SAFE_INTEGER (every
 * step is smaller, and rounding keeps a larger one larger), else from its text. */
function decimalValue(text: string, at: number, end: number): number {
  let value = 0;
  for (let i = at; i < end; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x2e) return Number(text.slice(at, end)); // a fraction
    value = value * 10 + (c - 0x30);
  }
  return value <= Number.MAX_SAFE_INTEGER ? value : Number(text.slice(at, end));
}

/** The end of the JSON number at `at` that is plain decimal digits (no sign, no leading zero, no
 * exponent), with a fraction if `fraction`; -1 if there is none. */
function decimalEnd(text: string, at: number, fraction: boolean): number {
  let end = at;
  while (isDigit(text.charCodeAt(end))) end++;
  if (end === at || (end - at > 1 && text.charCodeAt(at) === 0x30)) return -1;
  if (!fraction || text.charCodeAt(end) !== 0x2e) return end;
  const digits = ++end;
  while (isDigit(text.charCodeAt(end))) end++;
  return end === digits ? -1 : end;
}

function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39;
}

function isHexDigit(c: number): boolean {
  return isDigit(c) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);
}

/** One waiter as formatQueue writes it. */
function entryText({ ticket, owner, ttlMs }: QueuedWaiter): string {
  return `${TICKET}${ticket}${OWNER}${JSON.stringify(owner)}${TTL}${ttlMs}}`;
}

/** The file content; '' for an empty queue (the file is then truncated to nothing). The text
 * JSON.stringify makes of `{ waiters: [{ t, o, ttl }], freeSince }`, by concatenation. */
export function formatQueue(queue: WaitQueue): string {
  const { waiters } = queue;
  if (waiters.length === 0) return '';
  let text = HEAD;
  for (let i = 0; i < waiters.length; i++) text += `${i === 0 ? '' : ','}${entryText(waiters[i]!)}`;
  return `${text}${TAIL}${queue.freeSince}}`;
}

/** A ticket later than every queued one (the largest is `maxTicket`) and unique across restarts
 * of the queue: wall-clock µs. */
export function nextTicket(maxTicket: number, nowMs: number): number {
  return Math.max(maxTicket + 1, Math.floor(nowMs * 1000));
}

/** The largest ticket in `queue` (0 when empty). */
export function maxTicket(queue: WaitQueue): number {
  let max = 0;
  for (const { ticket } of queue.waiters) if (ticket > max) max = ticket;
  return max;
}

/**
 * A queue as read under the transition lock. Changed as text while it is formatQueue's own layout
 * and the change is one the text's shape settles (the front waiter handed the lease or gone, a
 * waiter joining at the back); built into entries for any other change, and then kept as those.
 */
export interface QueueRead {
  /** The text in the file, as last read or written ('' when empty): a queue changed back to the
   * same text is unchanged, and is not written again. */
  written: string;
  /** The queue's text as changed so far (when `entries` is not built). */
  text: string;
  /** `text`'s shape, once scanned (see scanOwnQueue); `undefined` again after a change. */
  shape: QueueShape | undefined;
  /** The queue's entries, once built: from then on the queue. */
  entries: WaitQueue | undefined;
}

/** A waiting acquire's place in the id's queue, once it has one. */
export interface Place {
  readonly owner: string;
  ticket?: number | undefined;
  /** Its flocked `.wait` file; a hand-off renames that file to the new generation's `.live`. */
  fd?: number | undefined;
}
