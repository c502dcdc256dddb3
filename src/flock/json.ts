/**
 * A strict RFC 8259 JSON reader that keeps numbers as their source text, so a uint64 token is read
 * exactly (JSON.parse rounds above 2^53, and Node 20 has no reviver source access).
 */

/** A JSON number, as written. */
export class JsonNumber {
  constructor(readonly text: string) {}
}

export type JsonValue = null | boolean | string | JsonNumber | JsonValue[] | { [key: string]: JsonValue };

const MAX_DEPTH = 64;
const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
// eslint-disable-next-line no-control-regex -- JSON forbids raw control characters in strings: this is the check
const PLAIN_CHARS = /[^"\\\u0000-\u001f]*/y;
const ESCAPES: Record<string, string> = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };

class JsonSyntaxError extends SyntaxError {}

export function parseJson(text: string): JsonValue {
  let at = 0;

  const fail = (what: string): never => {
    throw new JsonSyntaxError(`${what} at offset ${at}`);
  };
  const skipSpace = (): void => {
    while (at < text.length) {
      const c = text.charCodeAt(at);
      if (c !== 0x20 && c !== 0x09 && c !== 0x0a && c !== 0x0d) return;
      at++;
    }
  };
  const expect = (literal: string): void => {
    if (!text.startsWith(literal, at)) fail(`expected ${literal}`);
    at += literal.length;
  };

  const string = (): string => {
    expect('"');
    let out = '';
    for (;;) {
      PLAIN_CHARS.lastIndex = at;
      const plain = PLAIN_CHARS.exec(text)![0];
      out += plain;
      at += plain.length;
      const c = text[at];
      if (c === '"') {
        at++;
        return out;
      }
      if (c !== '\\') fail(c === undefined ? 'unterminated string' : 'control character in string');
      const e = text[at + 1];
      if (e === 'u') {
        const hex = text.slice(at + 2, at + 6);
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) fail('bad \\u escape');
        out += String.fromCharCode(parseInt(hex, 16));
        at += 6;
      } else {
        const decoded = e === undefined ? undefined : ESCAPES[e];
        if (decoded === undefined) fail('bad escape');
        out += decoded;
        at += 2;
      }
    }
  };

  const value = (depth: number): JsonValue => {
    if (depth > MAX_DEPTH) fail('nested too deeply');
    skipSpace();
    const c = text[at];
    if (c === '{') {
      at++;
      const object: { [key: string]: JsonValue } = {};
      skipSpace();
      if (text[at] === '}') {
        at++;
        return object;
      }
      for (;;) {
        skipSpace();
        const key = string();
        skipSpace();
        expect(':');
        // Duplicate keys: the last wins, as in Go's encoding/json and JSON.parse.
        Object.defineProperty(object, key, {
          value: value(depth + 1),
          enumerable: true,
          writable: true,
          configurable: true,
        });
        skipSpace();
        if (text[at] === ',') {
          at++;
          continue;
        }
        expect('}');
        return object;
      }
    }
    if (c === '[') {
      at++;
      const array: JsonValue[] = [];
      skipSpace();
      if (text[at] === ']') {
        at++;
        return array;
      }
      for (;;) {
        array.push(value(depth + 1));
        skipSpace();
        if (text[at] === ',') {
          at++;
          continue;
        }
        expect(']');
        return array;
      }
    }
    if (c === '"') return string();
    if (c === 't') return (expect('true'), true);
    if (c === 'f') return (expect('false'), false);
    if (c === 'n') return (expect('null'), null);
    NUMBER.lastIndex = at;
    const number = NUMBER.exec(text);
    if (number === null) return fail(c === undefined ? 'unexpected end of input' : 'unexpected character');
    at += number[0].length;
    return new JsonNumber(number[0]);
  };

  const result = value(0);
  skipSpace();
  if (at !== text.length) fail('trailing characters');
  return result;
}
