/**
 * The election's lines (docs/ticketing-election.md): publish `P`, observe `O`, unobserve `U`,
 * and the pushed view `V`. Parsed and formatted here, for the server and the client alike.
 *
 * A view is one of: vacant (`V <key> <rev> -`); one exclusive holder
 * (`V <key> <rev> <token> <owner>[ <value>]`); or `count` holders of a shared lock or a semaphore
 * (`V <key> <rev> *<count>`).
 */
import { isName, isTokenText, NAME, PRINTABLE } from './protocol-fields.js';

/** A published value: 1–512 bytes of printable ASCII, spaces included. */
export const MAX_VALUE_BYTES = 512;

/** Is `value` a publishable value? */
export function isValue(value: string): boolean {
  return typeof value === 'string' && value.length >= 1 && value.length <= MAX_VALUE_BYTES && PRINTABLE.test(value);
}

export type ElectionRequest =
  /** Publish `value` as the holder under exactly `token`. */
  | {
      readonly op: 'P';
      readonly key: string;
      readonly token: bigint;
      readonly tokenText: string;
      readonly value: string;
    }
  /** Observe, or stop observing, the key. */
  | { readonly op: 'O' | 'U'; readonly key: string };

/** What a `V` says of its key. */
export type View =
  | { readonly holders: 0 }
  | { readonly holders: 1; readonly token: string; readonly owner: string; readonly value: string | undefined }
  /** Shared or semaphore holders, `count` ≥ 1. */
  | { readonly holders: 'many'; readonly count: number };

export type ElectionReply =
  /** Published: the key's value is now the one the `P` sent. */
  | { readonly op: 'P'; readonly token: string; readonly key: string }
  /** A view of the key at `rev` (a canonical decimal). */
  | { readonly op: 'V'; readonly key: string; readonly rev: string; readonly view: View }
  /** Unobserved (no `V` for the key follows); `busy`: an `O` refused over a limit. */
  | { readonly op: 'U'; readonly key: string; readonly busy: boolean };

const REV = /^(?:0|[1-9][0-9]{0,19})$/;
const COUNT = /^\*[1-9][0-9]{0,5}$/;

/** Parses a `P`, `O` or `U` request line; a string says what is wrong with it. */
export function electionRequest(line: string): ElectionRequest | string {
  const op = line[0] as 'P' | 'O' | 'U';
  if (op === 'P') {
    const a = line.indexOf(' ', 2);
    const b = a === -1 ? -1 : line.indexOf(' ', a + 1);
    if (line[1] !== ' ' || b === -1) return 'P takes 3 fields: P <key> <token> <value>';
    const key = line.slice(2, a);
    const tokenText = line.slice(a + 1, b);
    const value = line.slice(b + 1);
    if (!NAME.test(key)) return 'key must be 1-256 bytes of printable ASCII without spaces';
    if (!isTokenText(tokenText)) return 'token must be a canonical decimal integer in 1..2^64-1';
    if (!isValue(value)) return `value must be 1-${MAX_VALUE_BYTES} bytes of printable ASCII`;
    return { op, key, token: BigInt(tokenText), tokenText, value };
  }
  const key = line.slice(2);
  if (line[1] !== ' ' || key.includes(' ')) return `${op} takes 1 field: ${op} <key>`;
  if (!NAME.test(key)) return 'key must be 1-256 bytes of printable ASCII without spaces';
  return { op, key };
}

export const formatPublish = (key: string, token: bigint | string, value: string): string =>
  `P ${key} ${token} ${value}\n`;
export const formatObserve = (key: string): string => `O ${key}\n`;
export const formatUnobserve = (key: string): string => `U ${key}\n`;
export const formatPublished = (token: bigint | string, key: string): string => `P ${token} ${key}\n`;
export const formatUnobserved = (key: string, busy = false): string => (busy ? `U ${key} busy\n` : `U ${key}\n`);

/** A `V` line: vacant, one exclusive holder (with its value, if any), or a count of holders. */
export function formatView(key: string, rev: bigint, view: View): string {
  if (view.holders === 0) return `V ${key} ${rev} -\n`;
  if (view.holders === 'many') return `V ${key} ${rev} *${view.count}\n`;
  const value = view.value === undefined ? '' : ` ${view.value}`;
  return `V ${key} ${rev} ${view.token} ${view.owner}${value}\n`;
}

/** The key and rev of a line `formatView` made (trusted: not checked again). */
export function viewHead(line: string): { key: string; rev: bigint } {
  const keyEnd = line.indexOf(' ', 2);
  return { key: line.slice(2, keyEnd), rev: BigInt(line.slice(keyEnd + 1, line.indexOf(' ', keyEnd + 1))) };
}

/** Parses a `P`, `V` or `U` reply line; undefined when it is malformed. */
export function electionReply(line: string): ElectionReply | undefined {
  const fields = line.split(' ');
  const op = fields[0];
  if (op === 'P') {
    if (fields.length !== 3 || !isTokenText(fields[1]!) || !isName(fields[2]!)) return undefined;
    return { op, token: fields[1]!, key: fields[2]! };
  }
  if (op === 'U') {
    if ((fields.length !== 2 && (fields.length !== 3 || fields[2] !== 'busy')) || !isName(fields[1]!)) return undefined;
    return { op, key: fields[1]!, busy: fields.length === 3 };
  }
  if (op !== 'V' || fields.length < 4 || !isName(fields[1]!) || !REV.test(fields[2]!)) return undefined;
  const [, key, rev, third] = fields as [string, string, string, string];
  if (fields.length === 4 && third === '-') return { op, key, rev, view: { holders: 0 } };
  if (fields.length === 4 && COUNT.test(third))
    return { op, key, rev, view: { holders: 'many', count: Number(third.slice(1)) } };
  if (fields.length < 5 || !isTokenText(third) || !isName(fields[4]!)) return undefined;
  const prefix = 2 + key.length + 1 + rev.length + 1 + third.length + 1 + fields[4]!.length;
  const value = fields.length === 5 ? undefined : line.slice(prefix + 1);
  if (value !== undefined && !isValue(value)) return undefined;
  return { op, key, rev, view: { holders: 1, token: third, owner: fields[4]!, value } };
}
