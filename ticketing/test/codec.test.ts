// The server's byte-level codec (RequestReader, ReplyBuffer) against the string grammar it must
// match exactly: parseRequest and the format* functions stay the one definition of the wire format.
import { describe, expect, test } from 'vitest';
import {
  MAX_TOKEN,
  ReplyBuffer,
  RequestReader,
  formatAcquired,
  formatConflict,
  formatBusy,
  formatError,
  formatGone,
  formatKept,
  formatNotReleased,
  formatReleased,
  formatTimedOut,
  parseRequest,
} from '../src/protocol.js';

/** What RequestReader read, in parseRequest's shape. */
function viaReader(line: string): unknown {
  // Pad on both sides: the reader must stay inside [start, end).
  const buf = Buffer.from(`A k o 1\n${line}\nR k 1`, 'latin1');
  const start = 8;
  const r = new RequestReader().read(buf, start, start + Buffer.byteLength(line, 'latin1'));
  switch (r.op) {
    case 'A':
      return { op: 'A', key: r.key, owner: r.owner, waitMs: r.waitMs, mode: r.mode };
    case 'R':
    case 'K':
      return { op: r.op, key: r.key, token: r.token, tokenText: r.token.toString() };
    case 'H':
      return { op: 'H', secret: r.secret };
    default:
      return { op: 'error', detail: r.detail };
  }
}

describe('RequestReader', () => {
  const name256 = 'n'.repeat(256);
  const lines = [
    'A orders worker-1 2500',
    'A k o 0',
    `A ${name256} ${name256} 9007199254740991`,
    `A ${name256}x o 0`,
    'A k o 9007199254740992',
    'A k o 00',
    'A k o 01',
    'A k o -1',
    'A k o ',
    'A k  o 1',
    'A k o 1 ',
    'A k o',
    'A k\u0000 o 1',
    'A k\u00e9 o 1',
    'A k o 1\r',
    'R k 1',
    'R k 0',
    'R k 01',
    'R k 1795947255842404',
    'R k 9007199254740991',
    'R k 9007199254740992',
    `R k ${MAX_TOKEN}`,
    `R k ${MAX_TOKEN + 1n}`,
    'R k 99999999999999999999',
    'R  1',
    'R k',
    'R k 1 2',
    'K k 1',
    'K k 0',
    'K k 01',
    'K k -1',
    'K k 1795947255842404',
    'K k 9007199254740992',
    `K k ${MAX_TOKEN}`,
    `K k ${MAX_TOKEN + 1n}`,
    `K ${name256} 1`,
    `K ${name256}x 1`,
    'K  1',
    'K k',
    'K k 1 2',
    'K k 1 ',
    'K k\u00e9 1',
    'K',
    'A k o 1 x',
    'A k o 1 s',
    'A k o 0 1',
    'A k o 0 65535',
    'A k o 0 65536',
    'A k o 0 0',
    'A k o 0 01',
    'A k o 0 S',
    'A k o 0 s ',
    'A k o 0 s 1',
    'KK k 1',
    'k k 1',
    'H s3cret',
    'H',
    'X k o 1',
    'A',
    'AB k o 1',
    '',
    'a k o 1',
  ];
  test.each(lines)('%j reads as parseRequest parses it', (line) => {
    const expected = parseRequest(line);
    expect(viaReader(line)).toEqual(
      expected.op === 'R' || expected.op === 'K' ? { ...expected, tokenText: expected.token.toString() } : expected,
    );
  });

  test('random lines over the request alphabet read as parseRequest parses them', () => {
    const alphabet = ['A', 'R', 'K', 'H', ' ', '0', '1', '9', 'k', 's', 'x', '~', '\r', '\u0000', '\u00ff'];
    let seed = 12345;
    const rand = (): number => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32;
    for (let i = 0; i < 5000; i++) {
      const prefix = ['A k o ', 'R k ', 'K k ', 'A ', 'R ', 'K ', ''][Math.floor(rand() * 7)]!;
      let line = prefix;
      const n = Math.floor(rand() * 12);
      for (let j = 0; j < n; j++) line += alphabet[Math.floor(rand() * alphabet.length)];
      const expected = parseRequest(line);
      expect(viaReader(line), JSON.stringify(line)).toEqual(
        expected.op === 'R' || expected.op === 'K' ? { ...expected, tokenText: expected.token.toString() } : expected,
      );
    }
  });
});

describe('ReplyBuffer', () => {
  test('encodes the same bytes as the format functions, growing as needed', () => {
    const out = new ReplyBuffer(8);
    const key = 'k'.repeat(256);
    const owner = 'o'.repeat(256);
    const expected: string[] = [];
    // Around the two 10^8 halves the encoder splits a token into: zeros inside the low half.
    const tokens = [1n, 9n, 10n, 99_999_999n, 100_000_000n, 100_000_001n, 1_000_000_000n, 120_000_000_345n];
    tokens.push(1795947255842404n, 1795947200000004n, 1795947255800000n, 9007199254740991n, 9007199254740992n);
    for (const token of [...tokens, MAX_TOKEN]) {
      out.acquired(token, owner, key);
      expected.push(formatAcquired(token, owner, key));
      out.acquired(token, owner, key, 65534);
      expected.push(formatAcquired(token, owner, key, 65534));
      out.refused(0x43, owner, key);
      expected.push(formatConflict(owner, key));
      out.releaseReply(0x52, token, 'orders');
      expected.push(formatReleased(token, 'orders'));
      out.releaseReply(0x4e, token, key);
      expected.push(formatNotReleased(token, key));
      out.releaseReply(0x47, token, key);
      expected.push(formatGone(token, key));
      out.kept(token, key, 30_000);
      expected.push(formatKept(token, key, 30_000));
    }
    for (const leaseMs of [0, 1, 999, 2_147_483_647]) {
      out.kept(1795947255842404n, 'orders', leaseMs);
      expected.push(formatKept(1795947255842404n, 'orders', leaseMs));
    }
    out.refused(0x54, 'w2', 'orders');
    expected.push(formatTimedOut('w2', 'orders'));
    out.refused(0x42, owner, key);
    expected.push(formatBusy(owner, key));
    out.line(formatError('bad_request', 'unknown request'));
    expected.push(formatError('bad_request', 'unknown request'));
    expect(out.buf.toString('latin1', 0, out.length)).toBe(expected.join(''));
  });
});
