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
 * per-entry checks were most of a transition's queue work: docs/bench.md, "The fourteenth round");
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

/** formatQueue's own layout, every entry valid; `undefined` for anything else (the general reader
 * decides, so both readers agree on every text this one accepts). */
function parseOwnQueue(text: string): WaitQueue | undefined {
  if (!text.startsWith(HEAD)) return undefined;
  const waiters: QueuedWaiter[] = [];
  let at = HEAD.length;
  if (text.charCodeAt(at) !== 0x5d) {
    for (;;) {
      if (!text.startsWith(TICKET, at)) return undefined;
      const ticketEnd = decimalEnd(text, (at += TICKET.length), false);
      const ticket = Number(text.slice(at, ticketEnd));
      if (ticketEnd < 0 || !Number.isSafeInteger(ticket) || !text.startsWith(OWNER, ticketEnd)) return undefined;
      // The owner: a JSON string; the text between its quotes when it has no escape.
      const from = ticketEnd + OWNER.length;
      if (text.charCodeAt(from) !== 0x22) return undefined;
      let end = from + 1;
      let escaped = false;
      for (let c = text.charCodeAt(end); c !== 0x22; c = text.charCodeAt(end)) {
        if (!(c >= 0x20)) return undefined; // a raw control character, or the text's end (NaN)
        if (c === 0x5c) escaped = true;
        end += c === 0x5c ? 2 : 1;
      }
      let owner: string;
      try {
        owner = escaped ? (JSON.parse(text.slice(from, end + 1)) as string) : text.slice(from + 1, end);
      } catch {
        return undefined;
      }
      if (owner === '' || !text.startsWith(TTL, end + 1)) return undefined;
      const ttlEnd = decimalEnd(text, (at = end + 1 + TTL.length), true);
      const ttlMs = Number(text.slice(at, ttlEnd));
      if (ttlEnd < 0 || !(ttlMs > 0) || text.charCodeAt(ttlEnd) !== 0x7d) return undefined;
      waiters.push({ ticket, owner, ttlMs });
      at = ttlEnd + 1;
      if (text.charCodeAt(at) !== 0x2c) break;
      at++;
    }
    if (!text.startsWith(TAIL, at)) return undefined;
  } else if (!text.startsWith(TAIL, at)) return undefined;
  const freeEnd = decimalEnd(text, (at += TAIL.length), true);
  if (freeEnd < 0 || text.charCodeAt(freeEnd) !== 0x7d || freeEnd + 1 !== text.length) return undefined;
  const freeSince = Number(text.slice(at, freeEnd));
  return Number.isFinite(freeSince) ? { waiters, freeSince } : undefined;
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

/** The file content; '' for an empty queue (the file is then truncated to nothing). The text
 * JSON.stringify makes of `{ waiters: [{ t, o, ttl }], freeSince }`, by concatenation. */
export function formatQueue(queue: WaitQueue): string {
  const { waiters } = queue;
  if (waiters.length === 0) return '';
  let text = HEAD;
  for (let i = 0; i < waiters.length; i++) {
    const { ticket, owner, ttlMs } = waiters[i]!;
    text += `${i === 0 ? '' : ','}${TICKET}${ticket}${OWNER}${JSON.stringify(owner)}${TTL}${ttlMs}}`;
  }
  return `${text}${TAIL}${queue.freeSince}}`;
}

/** A ticket later than every queued one and unique across restarts of the queue: wall-clock µs. */
export function nextTicket(queue: WaitQueue, nowMs: number): number {
  const last = queue.waiters.reduce((max, w) => Math.max(max, w.ticket), 0);
  return Math.max(last + 1, Math.floor(nowMs * 1000));
}
