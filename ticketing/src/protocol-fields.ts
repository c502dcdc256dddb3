/**
 * The wire's fields (docs/ticketing.md "Wire protocol"), shared by the request and reply grammars
 * of protocol.ts and of the election's lines (election-wire.ts). Numbers are canonical decimals
 * (no sign, no leading zero): a token is echoed back and matched as text, so `007` and `7` must
 * never both be "the same token".
 */
import { MAX_TOKEN } from '#kernel';

export { MAX_TOKEN };
const MAX_TOKEN_TEXT = MAX_TOKEN.toString();

export const NAME = /^[\x21-\x7e]{1,256}$/;
const TOKEN = /^[1-9][0-9]{0,19}$/;
/** Milliseconds (an `A` request's wait, a `K` reply's lease). */
const MS = /^(?:0|[1-9][0-9]{0,15})$/;
/** Free printable text (an `E` detail, a published value). */
export const PRINTABLE = /^[\x20-\x7e]*$/;

/** Is `value` a valid key or owner (1–256 bytes of printable ASCII without spaces)? */
export function isName(value: string): boolean {
  return NAME.test(value);
}

/** Is `text` a canonical decimal token in 1..2^64-1? */
export function isTokenText(text: string): boolean {
  if (!TOKEN.test(text)) return false;
  return text.length < 20 || text <= MAX_TOKEN_TEXT; // same length: string order is numeric order
}

/** A canonical decimal of at most 2^53-1 ms (beyond that a number loses precision). */
export function parseMs(text: string): number | undefined {
  if (!MS.test(text)) return undefined;
  const value = Number(text);
  return Number.isSafeInteger(value) ? value : undefined;
}
