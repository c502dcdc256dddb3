/**
 * The wire format (docs/ticketing.md "Wire protocol"): one ASCII line per request or reply, fields
 * separated by one space, ended by `\n` (a preceding `\r` is accepted). Shared by the server and the
 * client so that both sides agree byte for byte on what is well-formed.
 *
 * Numbers on the wire are canonical decimals (no sign, no leading zero): a token is echoed back and
 * matched as text, so `007` and `7` must never both be "the same token".
 */

/** Default line limit, counting the terminator (`\n` or `\r\n`). */
export const DEFAULT_MAX_LINE_BYTES = 1024;
/** The smallest line limit a server accepts: room for the longest reply a key and owner of 256
 * bytes and a 20-digit token can produce (`A <token> <owner> <key>\r\n`). */
export const MIN_MAX_LINE_BYTES = 64;
/** `key` and `owner`: 1–256 bytes of printable ASCII without spaces. */
export const MAX_NAME_BYTES = 256;
import { MAX_PERMITS, type LockMode } from './modes.js';
import { electionReply, electionRequest, type ElectionReply, type ElectionRequest } from './election-wire.js';
import { isName, isTokenText, MAX_TOKEN, NAME, parseMs, PRINTABLE } from './protocol-fields.js';

export { isName, isTokenText, MAX_TOKEN };

/** A semaphore grant's slot: 0…65534. */
const SLOT = /^(?:0|[1-9][0-9]{0,4})$/;
/** E codes are lower-case words; details are free printable text. */
const ERROR_CODE = /^[a-z][a-z_]{0,63}$/;
/** An `A` request's mode field (docs/ticketing.md "Modes"): `x`, `s`, or N in 1–65535. */
const MODE = /^(?:x|s|[1-9][0-9]{0,4})$/;

/** Parses an `A` request's fifth field; undefined when it is not a mode. */
function parseMode(text: string): LockMode | undefined {
  if (!MODE.test(text)) return undefined;
  if (text === 'x' || text === 's') return text;
  const permits = Number(text);
  return permits <= MAX_PERMITS ? permits : undefined;
}

/** `host:port`, `[v6]:port`; port 1–65535. Used for M/L leader addresses. */
export function isAddress(text: string): boolean {
  const colon = text.lastIndexOf(':');
  if (colon <= 0 || colon === text.length - 1) return false;
  const host = text.slice(0, colon);
  const port = text.slice(colon + 1);
  if (!/^[1-9][0-9]{0,4}$/.test(port) || Number(port) > 65535) return false;
  if (host.startsWith('[')) return /^\[[0-9A-Fa-f:.]+\]$/.test(host);
  return /^[\x21-\x7e]+$/.test(host) && !host.includes(':') && !host.includes('[');
}

// ---------------------------------------------------------------------------------------------
// Requests (client → server)

export type Request =
  | { readonly op: 'H'; readonly secret: string }
  | { readonly op: 'A'; readonly key: string; readonly owner: string; readonly waitMs: number; readonly mode: LockMode }
  | { readonly op: 'R'; readonly key: string; readonly token: bigint; readonly tokenText: string }
  /** Keep (docs/ticketing.md "Keep"): the same fields and rules as `R`. */
  | { readonly op: 'K'; readonly key: string; readonly token: bigint; readonly tokenText: string }
  /** Serving? (the leader probe): changes nothing; answered `W` by a node that applies requests. */
  | { readonly op: 'W' }
  /** Publish, observe, unobserve (election-wire.ts). */
  | ElectionRequest;

/** A request line that breaks the format: the server answers `E bad_request <detail>` and closes. */
export interface RequestError {
  readonly op: 'error';
  readonly detail: string;
}

/**
 * Parses one request line (without its terminator). Anything but printable ASCII, an empty or
 * doubled field, a wrong field count or an out-of-range number is a `RequestError`.
 */
export function parseRequest(line: string): Request | RequestError {
  const fields = line.split(' ');
  switch (fields[0]) {
    case 'A': {
      if (fields.length !== 4 && fields.length !== 5)
        return bad('A takes 3 or 4 fields: A <key> <owner> <wait_ms> [<mode>]');
      const [, key, owner, wait, modeText] = fields as [string, string, string, string, string | undefined];
      if (!NAME.test(key)) return bad('key must be 1-256 bytes of printable ASCII without spaces');
      if (!NAME.test(owner)) return bad('owner must be 1-256 bytes of printable ASCII without spaces');
      const waitMs = parseMs(wait);
      if (waitMs === undefined) return bad('wait_ms must be a canonical decimal integer >= 0');
      const mode = modeText === undefined ? 'x' : parseMode(modeText);
      if (mode === undefined) return bad('mode must be x, s or a canonical decimal integer in 1..65535');
      return { op: 'A', key, owner, waitMs, mode };
    }
    case 'R':
    case 'K': {
      const op = fields[0];
      if (fields.length !== 3) return bad(`${op} takes 2 fields: ${op} <key> <token>`);
      const [, key, tokenText] = fields as [string, string, string];
      if (!NAME.test(key)) return bad('key must be 1-256 bytes of printable ASCII without spaces');
      if (!isTokenText(tokenText)) return bad('token must be a canonical decimal integer in 1..2^64-1');
      return { op, key, token: BigInt(tokenText), tokenText };
    }
    case 'H': {
      if (fields.length !== 2 || !NAME.test(fields[1]!)) return bad('H takes 1 field: H <secret>');
      return { op: 'H', secret: fields[1]! };
    }
    case 'W':
      return fields.length === 1 ? { op: 'W' } : bad('W takes no fields');
    case 'P':
    case 'O':
    case 'U': {
      const request = electionRequest(line);
      return typeof request === 'string' ? bad(request) : request;
    }
    default:
      return bad(PRINTABLE.test(line) ? 'unknown request' : 'non-ASCII or control bytes');
  }
}

function bad(detail: string): RequestError {
  return { op: 'error', detail };
}

const SPACE = 0x20;
const MAX_SAFE_TOKEN = BigInt(Number.MAX_SAFE_INTEGER);

/**
 * The server's request parser: reads a line straight from the receive buffer into its own fields
 * (overwritten by the next `read`), making no string but the key and owner. Same grammar as
 * `parseRequest`, which stays the one definition of it: anything the fast path does not accept
 * outright (H, every malformed line) is handed to `parseRequest`, so errors and their details are
 * exactly its own.
 */
export class RequestReader {
  op: Request['op'] | 'error' = 'error';
  key = '';
  owner = '';
  waitMs = 0;
  mode: LockMode = 'x';
  token = 0n;
  secret = '';
  /** A `P` request's value. */
  value = '';
  /** The `RequestError` detail when `op` is `'error'`. */
  detail = '';

  /** Parses `buf[start, end)` (one line without its terminator). */
  read(buf: Buffer, start: number, end: number): this {
    const op = buf[start];
    if (end - start >= 5 && buf[start + 1] === SPACE) {
      if (op === 0x41 /* A */ && this.#acquire(buf, start + 2, end)) return this;
      if ((op === 0x52 || op === 0x4b) /* R, K */ && this.#tokenRequest(op, buf, start + 2, end)) return this;
    }
    const request = parseRequest(buf.toString('latin1', start, end));
    this.op = request.op;
    switch (request.op) {
      case 'A':
        this.key = request.key;
        this.owner = request.owner;
        this.waitMs = request.waitMs;
        this.mode = request.mode;
        break;
      case 'R':
      case 'K':
        this.key = request.key;
        this.token = request.token;
        break;
      case 'H':
        this.secret = request.secret;
        break;
      case 'P':
        this.key = request.key;
        this.token = request.token;
        this.value = request.value;
        break;
      case 'O':
      case 'U':
        this.key = request.key;
        break;
      case 'W':
        break;
      case 'error':
        this.detail = request.detail;
        break;
    }
    return this;
  }

  #acquire(buf: Buffer, at: number, end: number): boolean {
    const keyEnd = nameEnd(buf, at, end);
    if (keyEnd < 0 || buf[keyEnd] !== SPACE) return false;
    const ownerEnd = nameEnd(buf, keyEnd + 1, end);
    if (ownerEnd < 0 || buf[ownerEnd] !== SPACE) return false;
    // Without a mode (fifth field) only: a line with one takes the full parser.
    const waitMs = safeDecimal(buf, ownerEnd + 1, end, true);
    if (waitMs < 0) return false;
    this.op = 'A';
    this.mode = 'x';
    this.key = buf.toString('latin1', at, keyEnd);
    this.owner = buf.toString('latin1', keyEnd + 1, ownerEnd);
    this.waitMs = waitMs;
    return true;
  }

  /** `R` or `K`: `<key> <token>`. */
  #tokenRequest(op: number, buf: Buffer, at: number, end: number): boolean {
    const keyEnd = nameEnd(buf, at, end);
    if (keyEnd < 0 || buf[keyEnd] !== SPACE) return false;
    // Tokens up to 2^53-1 (today's wall-clock µs are about 2^51) without a string; larger ones
    // go through parseRequest.
    const token = safeDecimal(buf, keyEnd + 1, end, false);
    if (token < 0) return false;
    this.op = op === 0x52 ? 'R' : 'K';
    this.key = buf.toString('latin1', at, keyEnd);
    this.token = BigInt(token);
    return true;
  }
}

/** End of a name (1–256 bytes of 0x21–0x7e) starting at `at`: the index of the first byte after
 * it (a space or `end`), or -1. */
function nameEnd(buf: Buffer, at: number, end: number): number {
  const limit = Math.min(end, at + MAX_NAME_BYTES + 1);
  let i = at;
  for (; i < limit; i++) {
    const c = buf[i]!;
    if (c === SPACE) break;
    if (c < 0x21 || c > 0x7e) return -1;
  }
  if (i === at || i - at > MAX_NAME_BYTES) return -1;
  return i;
}

/** A canonical decimal filling `buf[at, end)` as a safe integer (`zero`: may be 0), else -1. */
function safeDecimal(buf: Buffer, at: number, end: number, zero: boolean): number {
  if (at >= end || end - at > 16) return -1;
  if (buf[at] === 0x30) return zero && end - at === 1 ? 0 : -1;
  let n = 0;
  for (let i = at; i < end; i++) {
    const d = buf[i]! - 0x30;
    if (d < 0 || d > 9) return -1;
    n = n * 10 + d;
  }
  return n <= Number.MAX_SAFE_INTEGER ? n : -1;
}

/** "00" to "99", two bytes each. */
const DIGIT_PAIRS = Buffer.from(Array.from({ length: 100 }, (_, i) => String(i).padStart(2, '0')).join(''), 'latin1');

/**
 * A connection's unwritten replies, encoded straight into one growing buffer (no string per
 * reply). The same bytes as the `format*` functions below.
 */
export class ReplyBuffer {
  buf: Buffer;
  length = 0;

  constructor(capacity: number) {
    this.buf = Buffer.allocUnsafeSlow(capacity);
  }

  /** `A <token> <owner> <key>`, and ` <slot>` for a semaphore grant (slot ≥ 0). */
  acquired(token: bigint, owner: string, key: string, slot = -1): void {
    this.#reserve(owner.length + key.length + 32);
    this.#byte(0x41);
    this.#byte(SPACE);
    this.#token(token);
    this.#byte(SPACE);
    this.#ascii(owner);
    this.#byte(SPACE);
    this.#ascii(key);
    if (slot >= 0) {
      this.#byte(SPACE);
      this.#ascii(String(slot));
    }
    this.#byte(0x0a);
  }
  /** `T`, `B`, `C`: `<op> <owner> <key>`. */
  refused(op: 0x54 | 0x42 | 0x43, owner: string, key: string): void {
    this.#reserve(owner.length + key.length + 4);
    this.#byte(op);
    this.#byte(SPACE);
    this.#ascii(owner);
    this.#byte(SPACE);
    this.#ascii(key);
    this.#byte(0x0a);
  }
  /** `R`, `N`, `G`: `<op> <token> <key>`. */
  releaseReply(op: 0x52 | 0x4e | 0x47, token: bigint, key: string): void {
    this.#reserve(key.length + 25);
    this.#byte(op);
    this.#byte(SPACE);
    this.#token(token);
    this.#byte(SPACE);
    this.#ascii(key);
    this.#byte(0x0a);
  }
  /** `K <token> <key> <lease_ms>`. */
  kept(token: bigint, key: string, leaseMs: number): void {
    this.#reserve(key.length + 43);
    this.#byte(0x4b);
    this.#byte(SPACE);
    this.#token(token);
    this.#byte(SPACE);
    this.#ascii(key);
    this.#byte(SPACE);
    this.#ascii(String(leaseMs));
    this.#byte(0x0a);
  }
  /** A whole formatted line (latin1), e.g. from `formatError`. */
  line(text: string): void {
    this.#reserve(text.length);
    this.#ascii(text);
  }

  #reserve(bytes: number): void {
    const need = this.length + bytes;
    if (need <= this.buf.length) return;
    const grown = Buffer.allocUnsafeSlow(Math.max(need, this.buf.length * 2));
    this.buf.copy(grown, 0, 0, this.length);
    this.buf = grown;
  }
  #byte(c: number): void {
    this.buf[this.length++] = c;
  }
  #ascii(text: string): void {
    const buf = this.buf;
    let at = this.length;
    for (let i = 0; i < text.length; i++) buf[at++] = text.charCodeAt(i);
    this.length = at;
  }
  #token(token: bigint): void {
    if (token > MAX_SAFE_TOKEN) {
      this.#ascii(token.toString());
      return;
    }
    // In two halves below 10^8: a token (wall-clock µs, about 2^51) is no small integer, and `%` on
    // a double that is not one is a call to fmod per digit (a third of the cost of a cycle's
    // parsing, state machine and encoding together, measured without sockets).
    const n = Number(token);
    const high = Math.floor(n / 1e8);
    if (high === 0) {
      this.#decimal(n, 1);
    } else {
      this.#decimal(high, 1);
      this.#decimal(n - high * 1e8, 8);
    }
  }
  /** `n` (an integer in 0..10^8-1) in decimal, with leading zeros to at least `width` digits. */
  #decimal(n: number, width: number): void {
    let digits = 1;
    for (let p = 10; p <= n; p *= 10) digits++;
    if (digits < width) digits = width;
    const buf = this.buf;
    let at = this.length + digits;
    this.length = at;
    // Two digits per step.
    for (let left = digits; left > 1; left -= 2) {
      const pair = (n % 100) * 2;
      n = (n / 100) | 0;
      buf[--at] = DIGIT_PAIRS[pair + 1]!;
      buf[--at] = DIGIT_PAIRS[pair]!;
    }
    if ((digits & 1) === 1) buf[at - 1] = 0x30 + n;
  }
}

export function formatAcquire(key: string, owner: string, waitMs: number, mode: LockMode = 'x'): string {
  return mode === 'x' ? `A ${key} ${owner} ${waitMs}\n` : `A ${key} ${owner} ${waitMs} ${mode}\n`;
}
export function formatRelease(key: string, token: bigint | string): string {
  return `R ${key} ${token}\n`;
}
export function formatKeep(key: string, token: bigint | string): string {
  return `K ${key} ${token}\n`;
}
export function formatHello(secret: string): string {
  return `H ${secret}\n`;
}
/** The leader probe, and a serving node's answer to it: the same one-letter line. */
export const SERVING_LINE = 'W\n';

// ---------------------------------------------------------------------------------------------
// Replies (server → client)

export type ErrorCode =
  | 'no_leader'
  | 'not_active'
  | 'auth_failed'
  | 'bad_request'
  | 'too_long'
  | 'capacity'
  /** Mutual TLS: the client's certificate did not verify; sent before any request is read. */
  | 'bad_certificate';

export type Reply =
  /** `slot`: a semaphore grant's (docs/ticketing.md "Modes"), undefined otherwise. */
  | {
      readonly op: 'A';
      readonly token: string;
      readonly owner: string;
      readonly key: string;
      readonly slot: number | undefined;
    }
  /** `C`: the request's mode does not fit the key's kind (refused at once, not queued). */
  | { readonly op: 'T' | 'B' | 'C'; readonly owner: string; readonly key: string }
  | { readonly op: 'R' | 'N'; readonly token: string; readonly key: string }
  /** Forbidden by access control: `id` is the acquire's owner, or the release's or keep's token
   * (docs/ticketing-access.md). */
  | { readonly op: 'F'; readonly id: string; readonly key: string }
  /** Kept: the grant's expiry is now at least `leaseMs` after the server applied the `K`. */
  | { readonly op: 'K'; readonly token: string; readonly key: string; readonly leaseMs: number }
  /** Gone: the key is not held under this token. */
  | { readonly op: 'G'; readonly token: string; readonly key: string }
  | { readonly op: 'M' | 'L'; readonly address: string }
  /** Serving: the answer to a `W` probe from a node that applies requests (the leader, whose lease
   * was confirmed when it answered; or a single-mode server). */
  | { readonly op: 'W' }
  /** `code` is any lower-case word: an unknown code is still an error (and fatal to the client). */
  | { readonly op: 'E'; readonly code: string; readonly detail: string }
  /** Published, a pushed view, unobserved (election-wire.ts). */
  | ElectionReply;

/**
 * Splits a request-answering reply (`A`/`T`/`B`/`C`/`F`/`R`/`N`/`K`/`G`) into its fields by the grammar's shape:
 * op, field count and the token's form. Key and owner are NOT checked: a client that looks them up
 * among its own (already valid) pending requests learns their validity from the match, at no cost;
 * anything it cannot match goes through `parseReply`, which checks everything. `undefined` for
 * every other line (including `M`/`L`/`E`).
 */
export function splitReply(line: string): AnswerReply | undefined {
  if (line.charCodeAt(1) !== 32) return undefined;
  const op = line[0];
  const a = line.indexOf(' ', 2);
  if (a <= 2) return undefined;
  const b = line.indexOf(' ', a + 1);
  if (op === 'A') {
    if (b <= a + 1) return undefined;
    const token = line.slice(2, a);
    if (!isTokenText(token)) return undefined;
    const c = line.indexOf(' ', b + 1);
    if (c === -1) return { op, token, owner: line.slice(a + 1, b), key: line.slice(b + 1), slot: undefined };
    const slot = line.slice(c + 1);
    if (c === b + 1 || !SLOT.test(slot) || Number(slot) >= MAX_PERMITS) return undefined;
    return { op, token, owner: line.slice(a + 1, b), key: line.slice(b + 1, c), slot: Number(slot) };
  }
  if (op === 'K') {
    if (b <= a + 1 || line.indexOf(' ', b + 1) !== -1) return undefined;
    const token = line.slice(2, a);
    const leaseMs = parseMs(line.slice(b + 1));
    if (!isTokenText(token) || leaseMs === undefined) return undefined;
    return { op, token, key: line.slice(a + 1, b), leaseMs };
  }
  if (b !== -1 || a === line.length - 1) return undefined;
  if (op === 'T' || op === 'B' || op === 'C') return { op, owner: line.slice(2, a), key: line.slice(a + 1) };
  if (op === 'F') return { op, id: line.slice(2, a), key: line.slice(a + 1) };
  if (op === 'R' || op === 'N' || op === 'G') {
    const token = line.slice(2, a);
    return isTokenText(token) ? { op, token, key: line.slice(a + 1) } : undefined;
  }
  return undefined;
}

/** The replies that answer a request. */
export type AnswerReply = Extract<Reply, { readonly op: 'A' | 'T' | 'B' | 'C' | 'F' | 'R' | 'N' | 'K' | 'G' }>;

/** Parses one reply line; `undefined` for anything malformed or unknown. */
export function parseReply(line: string): Reply | undefined {
  const answer = splitReply(line);
  if (answer !== undefined) {
    if (!NAME.test(answer.key) || ('owner' in answer && !NAME.test(answer.owner))) return undefined;
    if ('id' in answer && !NAME.test(answer.id)) return undefined;
    return answer;
  }
  const op = line[0];
  if (line[1] !== ' ' && line.length !== 1) return undefined;
  if (op === 'E') {
    const space = line.indexOf(' ', 2);
    const code = space === -1 ? line.slice(2) : line.slice(2, space);
    const detail = space === -1 ? '' : line.slice(space + 1);
    if (!ERROR_CODE.test(code) || !PRINTABLE.test(detail)) return undefined;
    return { op, code, detail };
  }
  if (op === 'M' || op === 'L') {
    const address = line.slice(2);
    return isAddress(address) ? { op, address } : undefined;
  }
  if (op === 'W' && line.length === 1) return { op };
  if (op === 'P' || op === 'V' || op === 'U') return electionReply(line);
  return undefined;
}

/**
 * The start of a grant cut off mid-line (`A <token> <owner> <key…`, a connection that closed
 * mid-reply): its token and owner are whole once the space after the owner arrived, so the grant
 * can still be identified (by owner and key prefix) and handed back by its exact token.
 */
export function parsePartialGrant(partial: string): { token: string; owner: string; keyPrefix: string } | undefined {
  if (!partial.startsWith('A ')) return undefined;
  const a = partial.indexOf(' ', 2);
  const b = a === -1 ? -1 : partial.indexOf(' ', a + 1);
  if (b === -1) return undefined;
  // A semaphore grant cut off in its slot: the key is whole.
  const c = partial.indexOf(' ', b + 1);
  if (c !== -1 && !/^[0-9]*$/.test(partial.slice(c + 1))) return undefined;
  const token = partial.slice(2, a);
  const owner = partial.slice(a + 1, b);
  const keyPrefix = c === -1 ? partial.slice(b + 1) : partial.slice(b + 1, c);
  if (!isTokenText(token) || !NAME.test(owner) || !/^[\x21-\x7e]*$/.test(keyPrefix)) return undefined;
  return { token, owner, keyPrefix };
}

export function formatAcquired(token: bigint | string, owner: string, key: string, slot?: number): string {
  return slot === undefined ? `A ${token} ${owner} ${key}\n` : `A ${token} ${owner} ${key} ${slot}\n`;
}
export function formatConflict(owner: string, key: string): string {
  return `C ${owner} ${key}\n`;
}
export function formatTimedOut(owner: string, key: string): string {
  return `T ${owner} ${key}\n`;
}
export function formatBusy(owner: string, key: string): string {
  return `B ${owner} ${key}\n`;
}
/** `F <id> <key>`: refused by access control; `id` is what the request is matched by (an
 * acquire's owner, a release's or keep's token). */
export const formatForbidden = (id: bigint | string, key: string): string => `F ${id} ${key}\n`;
export function formatReleased(token: bigint | string, key: string): string {
  return `R ${token} ${key}\n`;
}
export function formatNotReleased(token: bigint | string, key: string): string {
  return `N ${token} ${key}\n`;
}
export function formatKept(token: bigint | string, key: string, leaseMs: number): string {
  return `K ${token} ${key} ${leaseMs}\n`;
}
export function formatGone(token: bigint | string, key: string): string {
  return `G ${token} ${key}\n`;
}
export function formatMoved(address: string): string {
  return `M ${address}\n`;
}
export function formatLeader(address: string): string {
  return `L ${address}\n`;
}
export function formatError(code: ErrorCode, detail?: string): string {
  return detail ? `E ${code} ${detail}\n` : `E ${code}\n`;
}

// ---------------------------------------------------------------------------------------------
// Framing

/** What `LineFramer.push`/`resume` stopped on. */
export type FrameStatus = 'ok' | 'paused' | 'too_long';

/** A line as bytes `buf[start, end)`, terminator excluded; valid only during the call. Returns
 * `false` to stop early (backpressure). */
export type LineBytesHandler = (buf: Buffer, start: number, end: number) => boolean;

/**
 * Splits a byte stream into lines without ever buffering more than one line limit of an
 * unterminated line. The handler returns `false` to stop early (backpressure); the unread rest is
 * kept and `resume` continues with it. Lines are decoded as latin1 (one char per byte, so the
 * parser sees every non-ASCII byte and rejects it).
 */
export class LineFramer {
  /** Unterminated tail of the previous chunk (< maxLineBytes). */
  #tail: Buffer | undefined;
  /** Bytes kept when the handler paused, and where to continue in them. */
  #kept: Buffer | undefined;
  #keptAt = 0;

  constructor(readonly maxLineBytes: number) {}

  /** Bytes received but not yet handed to the handler. */
  get bufferedBytes(): number {
    return (this.#tail?.length ?? 0) + (this.#kept ? this.#kept.length - this.#keptAt : 0);
  }

  push(chunk: Buffer, onLine: (line: string) => boolean): FrameStatus {
    return this.pushBytes(chunk, (buf, start, end) => onLine(buf.toString('latin1', start, end)));
  }

  /** `push` without a string per line (the server's hot path). */
  pushBytes(chunk: Buffer, onLine: LineBytesHandler): FrameStatus {
    if (this.#kept !== undefined) {
      // Data arrived while paused (it was already in flight): append it to what is kept.
      this.#kept = Buffer.concat([this.#kept.subarray(this.#keptAt), chunk]);
      this.#keptAt = 0;
      return 'paused';
    }
    let start = 0;
    const tail = this.#tail;
    if (tail !== undefined) {
      // Finish the split line without copying the whole chunk.
      const nl = chunk.indexOf(10);
      if (nl === -1) {
        if (tail.length + chunk.length >= this.maxLineBytes) return 'too_long';
        this.#tail = Buffer.concat([tail, chunk]);
        return 'ok';
      }
      this.#tail = undefined;
      if (tail.length + nl + 1 > this.maxLineBytes) return 'too_long';
      const joined = Buffer.concat([tail, chunk.subarray(0, nl + 1)]);
      const status = this.#scan(joined, 0, onLine);
      if (status !== 'ok') {
        if (status === 'paused') this.#keep(chunk, nl + 1);
        return status;
      }
      start = nl + 1;
    }
    return this.#scan(chunk, start, onLine);
  }

  /** The unterminated line received so far (latin1), if any: what a connection that closed
   * mid-reply left behind. */
  partialLine(): string | undefined {
    return this.#tail === undefined ? undefined : this.#tail.toString('latin1');
  }

  /** Continues with the bytes kept by a pause. */
  resume(onLine: (line: string) => boolean): FrameStatus {
    return this.resumeBytes((buf, start, end) => onLine(buf.toString('latin1', start, end)));
  }

  resumeBytes(onLine: LineBytesHandler): FrameStatus {
    const kept = this.#kept;
    if (kept === undefined) return 'ok';
    const at = this.#keptAt;
    this.#kept = undefined;
    return this.#scan(kept, at, onLine);
  }

  #scan(buf: Buffer, start: number, onLine: LineBytesHandler): FrameStatus {
    const max = this.maxLineBytes;
    let pos = start;
    for (;;) {
      const nl = buf.indexOf(10, pos);
      if (nl === -1) break;
      if (nl + 1 - pos > max) return 'too_long';
      const end = nl > pos && buf[nl - 1] === 13 ? nl - 1 : nl;
      const lineStart = pos;
      pos = nl + 1;
      if (!onLine(buf, lineStart, end)) {
        if (pos < buf.length) this.#keep(buf, pos);
        return 'paused';
      }
    }
    const rest = buf.length - pos;
    if (rest >= max) return 'too_long';
    // Copy the small tail so the (up to 64 KiB) chunk it came from can be collected.
    if (rest > 0) this.#tail = Buffer.from(buf.subarray(pos));
    return 'ok';
  }

  #keep(buf: Buffer, at: number): void {
    // A copy: the server's chunks are views of one receive buffer that the next read reuses.
    this.#kept = Buffer.from(buf.subarray(at));
    this.#keptAt = 0;
  }
}
