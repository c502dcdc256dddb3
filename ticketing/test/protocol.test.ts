/** The wire codec: request and reply grammar, canonical numbers, framing and its limits. */
import { describe, expect, test } from 'vitest';
import {
  LineFramer,
  MAX_TOKEN,
  formatAcquired,
  formatAcquire,
  formatBusy,
  formatConflict,
  formatError,
  formatGone,
  formatKeep,
  formatKept,
  formatNotReleased,
  formatReleased,
  formatTimedOut,
  isAddress,
  isName,
  isTokenText,
  parseReply,
  parsePartialGrant,
  splitReply,
  parseRequest,
  SERVING_LINE,
} from '../src/protocol.js';

describe('requests', () => {
  test('A, R and H parse; numbers are exact', () => {
    expect(parseRequest('A orders worker-1 2500')).toEqual({
      op: 'A',
      key: 'orders',
      owner: 'worker-1',
      waitMs: 2500,
      mode: 'x',
    });
    expect(parseRequest('A k o 0')).toEqual({ op: 'A', key: 'k', owner: 'o', waitMs: 0, mode: 'x' });
    expect(parseRequest('A k o 0 x')).toEqual({ op: 'A', key: 'k', owner: 'o', waitMs: 0, mode: 'x' });
    expect(parseRequest('A k o 5 s')).toEqual({ op: 'A', key: 'k', owner: 'o', waitMs: 5, mode: 's' });
    expect(parseRequest('A k o 5 65535')).toEqual({ op: 'A', key: 'k', owner: 'o', waitMs: 5, mode: 65535 });
    expect(parseRequest(`R k ${MAX_TOKEN}`)).toEqual({
      op: 'R',
      key: 'k',
      token: MAX_TOKEN,
      tokenText: MAX_TOKEN.toString(),
    });
    expect(parseRequest('H s3cret')).toEqual({ op: 'H', secret: 's3cret' });
  });

  test('W (the leader probe) takes no fields; its answer is the same bare line', () => {
    expect(parseRequest('W')).toEqual({ op: 'W' });
    expect(parseRequest('W x')).toEqual({ op: 'error', detail: 'W takes no fields' });
    expect(parseRequest('W ')).toEqual({ op: 'error', detail: 'W takes no fields' });
    expect(SERVING_LINE).toBe('W\n');
    expect(parseReply('W')).toEqual({ op: 'W' });
    expect(parseReply('W x')).toBeUndefined();
    expect(parseReply('WW')).toBeUndefined();
  });

  test('K parses as R does: a key and an exact token', () => {
    expect(parseRequest('K orders 1795947255842404')).toEqual({
      op: 'K',
      key: 'orders',
      token: 1795947255842404n,
      tokenText: '1795947255842404',
    });
    expect(parseRequest(`K k ${MAX_TOKEN}`)).toEqual({
      op: 'K',
      key: 'k',
      token: MAX_TOKEN,
      tokenText: `${MAX_TOKEN}`,
    });
    expect(parseRequest(formatKeep('k', 42n).trimEnd())).toEqual({ op: 'K', key: 'k', token: 42n, tokenText: '42' });
    expect(formatKeep('orders', 42n)).toBe('K orders 42\n');
  });

  test.each([
    ['', 'unknown request'],
    ['X k o 1', 'unknown request'],
    ['a k o 1', 'unknown request'],
    ['A k o', 'A takes 3 or 4 fields'],
    ['A k o 1 extra', 'mode must be'],
    ['A k o 1 0', 'mode must be'],
    ['A k o 1 65536', 'mode must be'],
    ['A k o 1 007', 'mode must be'],
    ['A k o 1 s x', 'A takes 3 or 4 fields'],
    ['A  k o 1', 'key must be'],
    ['A  k o', 'key must be'],
    ['A k o -1', 'wait_ms'],
    ['A k o 01', 'wait_ms'],
    ['A k o 1.5', 'wait_ms'],
    ['A k o 99999999999999999', 'wait_ms'],
    [`A ${'k'.repeat(257)} o 1`, 'key must be'],
    [`A k ${'o'.repeat(257)} 1`, 'owner must be'],
    ['A k\to 1', 'A takes 3 or 4 fields'],
    ['A k\u00e9 o 1', 'key must be'],
    ['R k 0', 'token'],
    ['R k 007', 'token'],
    [`R k ${MAX_TOKEN + 1n}`, 'token'],
    ['R k', 'R takes 2 fields'],
    ['K k', 'K takes 2 fields'],
    ['K k 1 2', 'K takes 2 fields'],
    ['K  1', 'key must be'],
    ['K', 'K takes 2 fields'],
    ['K k 0', 'token'],
    ['K k 007', 'token'],
    ['K k -1', 'token'],
    ['K k x', 'token'],
    [`K k ${MAX_TOKEN + 1n}`, 'token'],
    [`K ${'k'.repeat(257)} 1`, 'key must be'],
    ['K k\u00e9 1', 'key must be'],
    ['k k 1', 'unknown request'],
    ['H', 'H takes 1 field'],
    ['H a b', 'H takes 1 field'],
    ['\u0000\u0001binary', 'non-ASCII or control bytes'],
  ])('%j is a bad request (%s)', (line, detail) => {
    const parsed = parseRequest(line);
    expect(parsed.op).toBe('error');
    expect((parsed as { detail: string }).detail).toContain(detail);
  });

  test('names: 1-256 bytes of printable ASCII without spaces', () => {
    expect(isName('a')).toBe(true);
    expect(isName('!~'.repeat(128))).toBe(true);
    expect(isName('x'.repeat(257))).toBe(false);
    expect(isName('')).toBe(false);
    expect(isName('a b')).toBe(false);
    expect(isName('ä')).toBe(false);
  });

  test('tokens: canonical decimal in 1..2^64-1', () => {
    expect(isTokenText('1')).toBe(true);
    expect(isTokenText('18446744073709551615')).toBe(true);
    expect(isTokenText('18446744073709551616')).toBe(false);
    expect(isTokenText('99999999999999999999')).toBe(false);
    expect(isTokenText('0')).toBe(false);
    expect(isTokenText('01')).toBe(false);
    expect(isTokenText('+1')).toBe(false);
  });
});

describe('replies', () => {
  test('every reply form round-trips through its formatter', () => {
    expect(parseReply(formatAcquired(42n, 'o', 'k').trimEnd())).toEqual({ op: 'A', token: '42', owner: 'o', key: 'k' });
    expect(parseReply(formatTimedOut('o', 'k').trimEnd())).toEqual({ op: 'T', owner: 'o', key: 'k' });
    expect(parseReply(formatBusy('o', 'k').trimEnd())).toEqual({ op: 'B', owner: 'o', key: 'k' });
    expect(parseReply(formatConflict('o', 'k').trimEnd())).toEqual({ op: 'C', owner: 'o', key: 'k' });
    expect(parseReply(formatAcquired(42n, 'o', 'k', 3).trimEnd())).toEqual({
      op: 'A',
      token: '42',
      owner: 'o',
      key: 'k',
      slot: 3,
    });
    expect(parseReply(formatReleased(42n, 'k').trimEnd())).toEqual({ op: 'R', token: '42', key: 'k' });
    expect(parseReply(formatNotReleased(42n, 'k').trimEnd())).toEqual({ op: 'N', token: '42', key: 'k' });
    expect(parseReply(formatKept(42n, 'k', 30_000).trimEnd())).toEqual({
      op: 'K',
      token: '42',
      key: 'k',
      leaseMs: 30_000,
    });
    expect(parseReply(formatGone(42n, 'k').trimEnd())).toEqual({ op: 'G', token: '42', key: 'k' });
    expect(parseReply('M 10.0.0.2:7000')).toEqual({ op: 'M', address: '10.0.0.2:7000' });
    expect(parseReply('L [::1]:7000')).toEqual({ op: 'L', address: '[::1]:7000' });
    expect(parseReply(formatError('bad_request', 'not a request').trimEnd())).toEqual({
      op: 'E',
      code: 'bad_request',
      detail: 'not a request',
    });
    expect(parseReply('E no_leader')).toEqual({ op: 'E', code: 'no_leader', detail: '' });
  });

  test('the exact bytes of each reply', () => {
    expect(formatAcquired(7n, 'own', 'key')).toBe('A 7 own key\n');
    expect(formatTimedOut('own', 'key')).toBe('T own key\n');
    expect(formatBusy('own', 'key')).toBe('B own key\n');
    expect(formatConflict('own', 'key')).toBe('C own key\n');
    expect(formatAcquired(7n, 'own', 'key', 0)).toBe('A 7 own key 0\n');
    expect(formatAcquire('key', 'own', 0)).toBe('A key own 0\n');
    expect(formatAcquire('key', 'own', 0, 'x')).toBe('A key own 0\n');
    expect(formatAcquire('key', 'own', 5, 's')).toBe('A key own 5 s\n');
    expect(formatAcquire('key', 'own', 5, 8)).toBe('A key own 5 8\n');
    expect(formatReleased(7n, 'key')).toBe('R 7 key\n');
    expect(formatNotReleased(7n, 'key')).toBe('N 7 key\n');
    expect(formatKept(7n, 'key', 30_000)).toBe('K 7 key 30000\n');
    expect(formatGone(7n, 'key')).toBe('G 7 key\n');
    expect(formatError('capacity')).toBe('E capacity\n');
  });

  test.each([
    '',
    'A',
    'A 1 o',
    'A 0 o k',
    'A x o k',
    'T o',
    'T o k x',
    'R k 1',
    'N 1',
    'K 1 k',
    'K 0 k 1',
    'K 1 k 01',
    'K 1 k -1',
    'K 1 k 1.5',
    'K 1 k 9007199254740992',
    'K 1 k 1 x',
    'K 1  1',
    'K 1 k\u00ff 1',
    'G 1',
    'G 0 k',
    'G 1 k x',
    'G 1 k\u00ff',
    'M nohostport',
    'M host:0',
    'M host:70000',
    'L a b',
    'E',
    'E Upper',
    'Z x',
    'AA 1 o k',
    'A 1 o k\u00ff',
    'A 1 o k 01',
    'A 1 o k 65535',
    'A 1 o k s',
    'A 1 o k 1 2',
    'A 1 o  1',
    'C o',
    'C o k x',
  ])('%j is malformed', (line) => {
    expect(parseReply(line)).toBeUndefined();
  });

  test('addresses', () => {
    expect(isAddress('h:1')).toBe(true);
    expect(isAddress('[fe80::1]:65535')).toBe(true);
    expect(isAddress('h')).toBe(false);
    expect(isAddress(':1')).toBe(false);
    expect(isAddress('a:b:1')).toBe(false);
  });
});

describe('framing', () => {
  const collect = (framer: LineFramer, chunks: string[]): { lines: string[]; statuses: string[] } => {
    const lines: string[] = [];
    const statuses = chunks.map((c) => framer.push(Buffer.from(c, 'latin1'), (l) => (lines.push(l), true)));
    return { lines, statuses };
  };

  test('lines split across chunks, several per chunk, with or without \\r', () => {
    const { lines, statuses } = collect(new LineFramer(64), ['A k o 1\nR k', ' 5\r\nH x\n', '\n']);
    expect(lines).toEqual(['A k o 1', 'R k 5', 'H x', '']);
    expect(statuses).toEqual(['ok', 'ok', 'ok']);
  });

  test('the limit counts the terminator: 63 bytes + \\n fit in 64, 64 + \\n do not', () => {
    expect(collect(new LineFramer(64), ['x'.repeat(63) + '\n']).statuses).toEqual(['ok']);
    expect(collect(new LineFramer(64), ['x'.repeat(64) + '\n']).statuses).toEqual(['too_long']);
    expect(collect(new LineFramer(64), ['x'.repeat(62) + '\r\n']).statuses).toEqual(['ok']);
    expect(collect(new LineFramer(64), ['x'.repeat(63) + '\r\n']).statuses).toEqual(['too_long']);
  });

  test('an unterminated line is refused as soon as it cannot fit, across chunks too', () => {
    const framer = new LineFramer(64);
    expect(collect(framer, ['x'.repeat(40)]).statuses).toEqual(['ok']);
    expect(framer.bufferedBytes).toBe(40);
    expect(collect(framer, ['x'.repeat(24)]).statuses).toEqual(['too_long']);
    expect(collect(new LineFramer(64), ['x'.repeat(10_000)]).statuses).toEqual(['too_long']);
  });

  test('pause keeps the unread rest; resume continues in order', () => {
    const framer = new LineFramer(64);
    const seen: string[] = [];
    let budget = 1;
    const onLine = (l: string): boolean => (seen.push(l), --budget > 0);
    expect(framer.push(Buffer.from('a\nb\nc\nd'), onLine)).toBe('paused');
    expect(seen).toEqual(['a']);
    expect(framer.push(Buffer.from('\ne\n'), onLine)).toBe('paused'); // arrived while paused: kept
    budget = 100;
    expect(framer.resume(onLine)).toBe('ok');
    expect(seen).toEqual(['a', 'b', 'c', 'd', 'e']);
  });

  test('partialLine exposes what a connection closed in the middle of', () => {
    const framer = new LineFramer(64);
    collect(framer, ['T o k\nA 123 own ke']);
    expect(framer.partialLine()).toBe('A 123 own ke');
  });
});

describe('the reply grammar has one home', () => {
  test.each([
    'A 42 o k',
    'T o k',
    'B o k',
    'R 42 k',
    'N 42 k',
    'A 0 o k',
    'A 007 o k',
    'A 18446744073709551616 o k',
    'A 1 o k x',
    'A 1 o ',
    'A  1 o k',
    'T o',
    'T o k x',
    'R 1 k x',
    'R x k',
    'N 1 ',
    'K 42 k 30000',
    'K 42 k 0',
    'K 42 k ',
    'K 042 k 1',
    'K 1 k\u0001 1',
    'G 42 k',
    'G 42 ',
    'G x k',
    'M 127.0.0.1:7000',
    'L [::1]:7000',
    'E capacity too many',
    'X 1 2',
    'A 1 o\u0001 k',
  ])('%j: splitReply agrees with parseReply wherever both apply', (line) => {
    const split = splitReply(line);
    const parsed = parseReply(line);
    if (parsed !== undefined && 'key' in parsed) expect(split).toEqual(parsed);
    if (split === undefined) expect(parsed === undefined || !('key' in parsed)).toBe(true);
    // splitReply checks shape and token only; the names are checked by parseReply.
    if (line === 'A 1 o\u0001 k') expect([split !== undefined, parsed]).toEqual([true, undefined]);
  });

  test('parsePartialGrant: a grant cut off after its owner yields token, owner and key prefix', () => {
    expect(parsePartialGrant('A 77 o2 k')).toEqual({ token: '77', owner: 'o2', keyPrefix: 'k' });
    expect(parsePartialGrant('A 77 o2 ')).toEqual({ token: '77', owner: 'o2', keyPrefix: '' });
    expect(parsePartialGrant('A 77 o2')).toBeUndefined(); // the owner may be cut off too
    expect(parsePartialGrant('A 077 o2 k')).toBeUndefined();
    expect(parsePartialGrant('T o2 k')).toBeUndefined();
    expect(parsePartialGrant('A 77 o2 k x')).toBeUndefined();
    expect(parsePartialGrant('A 77 o2 k 1')).toEqual({ token: '77', owner: 'o2', keyPrefix: 'k' });
  });
});
