import { readFileSync } from 'node:fs';
import { describe, expect, test } from 'vitest';
import { JsonNumber, parseJson } from '../src/flock/json.js';
import { parseLeaseFileName, safeID } from '../src/flock/layout.js';
import {
  formatQueue,
  frontWaiter,
  parseQueue,
  scanOwnQueue,
  withoutFront,
  withWaiter,
  type WaitQueue,
} from '../src/flock/queue.js';
import {
  expiresAtMs,
  formatRecord,
  formatUtcMs,
  isExpired,
  parseRecord,
  parseRfc3339,
  parseRfc3339Instant,
  RecordFormatError,
} from '../src/flock/record.js';
import { MAX_TOKEN, nextToken } from '../src/kernel/token.js';
import { MAX_EXPIRY_MS } from '../src/port/validate.js';

interface Vectors {
  safeID: Array<{ id: string; safeID: string }>;
  records: Array<{ written_by: string; text: string; owner: string; token: string; expiry_ms: number }>;
  corrupt_records: string[];
}
// A copy of ../shared/spec/flocklease-vectors.json (the golden vectors of the Go-compatible format).
const vectors = JSON.parse(
  readFileSync(new URL('./fixtures/flocklease-vectors.json', import.meta.url), 'utf8'),
) as Vectors;
const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);

describe('safeID (golden vectors)', () => {
  test.each(vectors.safeID)('$id → $safeID', ({ id, safeID: expected }) => {
    expect(safeID(id)).toBe(expected);
  });

  test('distinct ids that read alike get distinct names', () => {
    expect(safeID('a/b')).not.toBe(safeID('a_b'));
    expect(safeID('a/b').startsWith('a_b-')).toBe(true);
  });

  test('every vector name parses back as a lease file name', () => {
    for (const { safeID: safe } of vectors.safeID) {
      expect(parseLeaseFileName(`${safe}.lock`)).toEqual({ kind: 'lock', safe });
      expect(parseLeaseFileName(`${safe}.lease.json`)).toEqual({ kind: 'record', safe });
      expect(parseLeaseFileName(`${safe}.18446744073709551615.live`)).toEqual({ kind: 'live', safe, token: MAX_TOKEN });
      expect(parseLeaseFileName(`${safe}.lease.json.2837461`)).toEqual({ kind: 'temp', safe });
    }
    for (const stranger of [
      'notes.txt',
      'x.lock',
      'abc-ba7816bf8f01cfea.01.live',
      'abc-ba7816bf8f01cfea.lease.json.',
    ]) {
      expect(parseLeaseFileName(stranger)).toBeUndefined();
    }
  });
});

describe('record (golden vectors)', () => {
  test.each(vectors.records)('reads the record $written_by exactly', ({ text, owner, token, expiry_ms }) => {
    const record = parseRecord(bytes(text));
    expect(record.owner).toBe(owner);
    expect(record.token).toBe(BigInt(token));
    expect(record.expiryMs).toBe(expiry_ms);
  });

  test.each(vectors.records)('round-trips the record $written_by', ({ text }) => {
    const record = parseRecord(bytes(text));
    const again = parseRecord(bytes(formatRecord(record)));
    expect(again).toEqual(record);
  });

  test('writes the vector of this project byte for byte', () => {
    const ours = vectors.records.find((r) => r.written_by.startsWith('this project'))!;
    const record = parseRecord(bytes(ours.text));
    expect(record.session).toBe('../../etc/passwd');
    expect(formatRecord(record)).toBe(ours.text);
  });

  test('each record is written with its own owner and session, however the layouts were asked for before', () => {
    // The layouts are kept per owner (record.ts): one owner with two sessions in turn, and more
    // owners than are kept, must each still be written exactly as JSON.stringify would.
    const expected = (owner: string, session: string | undefined): string =>
      `{"owner":${JSON.stringify(owner)},"token":7,"expiry":"1970-01-01T00:00:00.000Z"` +
      `${session === undefined ? '' : `,"session":${JSON.stringify(session)}`}}`;
    for (const session of ['s1', 's2', undefined, 's1', 'q"uote']) {
      expect(formatRecord({ owner: 'same', token: 7n, expiryMs: 0, session })).toBe(expected('same', session));
    }
    for (let i = 0; i < 600; i++) {
      const owner = `owner-${i % 300}`;
      expect(formatRecord({ owner, token: 7n, expiryMs: 0, session: `s${i}` })).toBe(expected(owner, `s${i}`));
    }
  });

  test('keeps uint64 tokens exact where JSON.parse would round them', () => {
    const text = '{"owner":"o","token":18446744073709551615,"expiry":"2026-01-01T00:00:00Z"}';
    expect(parseRecord(bytes(text)).token).toBe(MAX_TOKEN);
    expect(BigInt((JSON.parse(text) as { token: number }).token)).not.toBe(MAX_TOKEN);
    expect(formatRecord({ owner: 'o', token: MAX_TOKEN, expiryMs: 0 })).toContain('"token":18446744073709551615,');
  });

  test('keeps the nanoseconds of a Go expiry: never expired before its recorded instant', () => {
    const go = vectors.records.find((r) => r.text.includes('.123456789+01:00'))!;
    const record = parseRecord(bytes(go.text));
    expect(record.expiryNanos).toBe(456_789);
    expect(expiresAtMs(record)).toBe(go.expiry_ms + 1);
    expect(isExpired(record, go.expiry_ms)).toBe(false); // 0.456789 ms early: the port once took over here
    expect(isExpired(record, go.expiry_ms + 1)).toBe(true);
    const whole = parseRecord(bytes('{"owner":"a","token":1,"expiry":"2026-11-29T11:00:00.123000000+02:00"}'));
    expect(whole.expiryNanos).toBeUndefined();
    expect(isExpired(whole, Date.UTC(2026, 10, 29, 9, 0, 0, 123))).toBe(true);
    expect(formatRecord(record)).toContain('"expiry":"2026-11-29T09:15:30.123456789Z"');
  });

  // The reader has a fast path for the exact layout this port writes; a space after `{` sends the
  // same record through the general reader, and the two must agree on every record.
  test.each([
    ...vectors.records.map((r) => r.text),
    formatRecord({ owner: 'quote " backslash \\ é \u0001 \u2028', token: MAX_TOKEN, expiryMs: 0, session: '../x' }),
    '{"owner":"a\\u00e9\\n","token":0,"expiry":"0001-01-01T00:00:00.000000001-23:59"}',
    '{"owner":"wörker ☃ \u2028","token":5,"expiry":"2026-11-29T09:00:00.000Z","session":"s/1 é"}',
  ])('the fast path and the general reader agree on %s', (text) => {
    expect(parseRecord(bytes(text))).toEqual(parseRecord(bytes(text.replace(/^\{/, '{ '))));
  });

  // The I/O layer hands over an ASCII record as text (nothing to decode), any other as bytes.
  test.each(vectors.records)('reads the record $written_by alike from its text and its bytes', ({ text }) => {
    expect(parseRecord(text)).toEqual(parseRecord(bytes(text)));
  });

  test.each([
    '{"owner":"a\\x","token":1,"expiry":"2026-11-29T09:00:00.000Z"}',
    '{"owner":"a","token":18446744073709551616,"expiry":"2026-11-29T09:00:00.000Z"}',
    '{"owner":"a","token":1,"expiry":"2026-02-30T09:00:00.000Z"}',
    '{"owner":"a","token":01,"expiry":"2026-11-29T09:00:00.000Z"}',
  ])('a record in our layout but invalid is still refused: %s', (text) => {
    expect(() => parseRecord(bytes(text))).toThrow(RecordFormatError);
  });

  test('ignores unknown fields and accepts a record without "session"', () => {
    const record = parseRecord(
      bytes(
        '{"future":{"nested":[1,2.5e3,null,true]},"owner":"a","token":3,"expiry":"2026-11-29T09:00:00Z","session":7}',
      ),
    );
    expect(record).toEqual({ owner: 'a', token: 3n, expiryMs: Date.UTC(2026, 10, 29, 9), session: undefined });
  });

  test.each(vectors.corrupt_records.map((text) => [text]))('refuses the corrupt record %j', (text) => {
    expect(() => parseRecord(bytes(text))).toThrow(RecordFormatError);
  });

  test.each([
    ['invalid UTF-8', Uint8Array.from([0x7b, 0xff, 0x7d])],
    ['a token with an exponent', bytes('{"owner":"x","token":1e3,"expiry":"2026-11-29T09:00:00Z"}')],
    ['a token with leading zeros', bytes('{"owner":"x","token":01,"expiry":"2026-11-29T09:00:00Z"}')],
    ['a string token', bytes('{"owner":"x","token":"1","expiry":"2026-11-29T09:00:00Z"}')],
    ['a missing owner', bytes('{"token":1,"expiry":"2026-11-29T09:00:00Z"}')],
    ['trailing garbage', bytes('{"owner":"x","token":1,"expiry":"2026-11-29T09:00:00Z"} x')],
    ['a lone key', bytes('{"owner"}')],
  ])('refuses %s', (_what, input) => {
    expect(() => parseRecord(input)).toThrow(RecordFormatError);
  });
});

describe('RFC 3339', () => {
  test.each([
    ['2026-11-29T10:15:30.123456789+01:00', Date.UTC(2026, 10, 29, 9, 15, 30, 123)],
    ['2026-11-29t09:14:30.5z', Date.UTC(2026, 10, 29, 9, 14, 30, 500)],
    ['0001-01-01T00:00:00Z', -62135596800000],
    ['2024-02-29T23:59:59-23:59', Date.UTC(2024, 2, 1, 23, 58, 59)],
    ['9999-12-31T23:59:59.999999999Z', 253402300799999],
  ])('reads %s', (text, ms) => {
    expect(parseRfc3339(text)).toBe(ms);
  });

  test.each([
    ['2026-11-29T11:00:00.000004+02:00', Date.UTC(2026, 10, 29, 9), 4_000],
    ['2026-11-29T10:59:59.999999999+02:00', Date.UTC(2026, 10, 29, 8, 59, 59, 999), 999_999],
    ['2026-11-29T09:00:00.0000000019Z', Date.UTC(2026, 10, 29, 9), 1],
    ['0001-01-01T00:00:00.000000001Z', -62135596800000, 1],
  ])('reads %s to the nanosecond', (text, ms, nanos) => {
    expect(parseRfc3339Instant(text)).toEqual({ ms, nanos });
  });

  test.each([
    '2026-11-29 10:15:30Z',
    '2026-13-01T00:00:00Z',
    '2023-02-29T00:00:00Z',
    '2026-11-29T24:00:00Z',
    '2026-11-29T10:15:60Z',
    '2026-11-29T10:15:30',
    '2026-11-29T10:15:30+24:00',
    '2026-11-29T10:15:30.Z',
    ' 2026-11-29T10:15:30Z',
  ])('refuses %j', (text) => {
    expect(parseRfc3339(text)).toBeUndefined();
  });
});

describe('UTC formatting (the writer side)', () => {
  const edges = [
    0,
    1,
    999,
    86_399_999,
    86_400_000,
    Date.UTC(1972, 1, 29, 12),
    Date.UTC(2000, 1, 29, 23, 59, 59, 999),
    Date.UTC(2100, 2, 1),
    Date.UTC(2026, 11, 31, 23, 59, 59, 999),
    MAX_EXPIRY_MS,
  ];

  test('writes what Date#toISOString writes, for edges and 20 000 random instants up to year 9999', () => {
    let seed = 12_345;
    const random = (): number => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31;
    const instants = [...edges];
    for (let i = 0; i < 20_000; i++) instants.push(Math.floor(random() * MAX_EXPIRY_MS));
    for (const ms of instants) expect(formatUtcMs(ms)).toBe(new Date(ms).toISOString());
  });

  test('a fractional millisecond is truncated, as Date truncates it', () => {
    expect(formatUtcMs(1_764_500_000_123.9)).toBe(new Date(1_764_500_000_123.9).toISOString());
    expect(formatUtcMs(1_764_500_000_123.9)).toBe('2025-11-30T10:53:20.123Z');
  });

  test('instants outside 1970–9999 still format (through Date)', () => {
    expect(formatUtcMs(-1)).toBe('1969-12-31T23:59:59.999Z');
    expect(formatUtcMs(-62_135_596_800_000)).toBe('0001-01-01T00:00:00.000Z');
  });

  test('a record written reads back to the same instant', () => {
    for (const expiryMs of edges) {
      const record = parseRecord(bytes(formatRecord({ owner: 'a', token: 7n, expiryMs, session: 's' })));
      expect(record).toEqual({ owner: 'a', token: 7n, expiryMs, session: 's' });
    }
  });
});

describe("wait queue (the .lock file's content)", () => {
  // Owners as a caller may name them: quotes, backslashes, control characters, non-ASCII, an emoji,
  // a lone surrogate (which JSON.stringify escapes).
  const owners = ['alice', 'p12345', 'say "hi"', 'back\\slash', 'tab\there', 'wörker ☃', '🦀', '\ud800', '\u007f'];
  const queues: WaitQueue[] = [
    { waiters: [{ ticket: 1_764_000_000_000_000, owner: 'alice', ttlMs: 30_000 }], freeSince: 0 },
    {
      waiters: owners.map((owner, i) => ({
        ticket: 1_764_000_000_000_000 + i,
        owner,
        ttlMs: i === 2 ? 0.5 : 1_000 + i,
      })),
      freeSince: 1_764_000_000_123.25,
    },
    { waiters: [{ ticket: 0, owner: 'x', ttlMs: Number.MAX_SAFE_INTEGER }], freeSince: Number.MAX_SAFE_INTEGER },
  ];
  /** What the queue is as JSON: what formatQueue must write, byte for byte. */
  const asJson = (q: WaitQueue): string =>
    JSON.stringify({
      waiters: q.waiters.map(({ ticket, owner, ttlMs }) => ({ t: ticket, o: owner, ttl: ttlMs })),
      freeSince: q.freeSince,
    });
  // A leading space keeps a text from the scanner (it only reads formatQueue's own layout) and is
  // valid JSON: the general reader's answer for the same text.
  const general = (text: string): WaitQueue => parseQueue(` ${text}`);

  test('writes what JSON.stringify writes, and reads it back exactly, as text and as bytes', () => {
    for (const queue of queues) {
      const text = formatQueue(queue);
      expect(text).toBe(asJson(queue));
      expect(parseQueue(text)).toEqual(queue);
      expect(parseQueue(new TextEncoder().encode(text))).toEqual(queue);
      expect(general(text)).toEqual(queue);
    }
    expect(formatQueue({ waiters: [], freeSince: 5 })).toBe('');
    expect(parseQueue('')).toEqual({ waiters: [], freeSince: 0 });
    expect(parseQueue(undefined)).toEqual({ waiters: [], freeSince: 0 });
  });

  test('the scanner and the general reader agree on every text: each cut short, and changed', () => {
    const texts = new Set<string>();
    for (const queue of queues) {
      const text = formatQueue(queue);
      for (let cut = 0; cut <= text.length; cut++) texts.add(text.slice(0, cut));
    }
    const base = formatQueue(queues[0]!);
    for (const [from, to] of [
      ['"t":1764', '"t":01764'],
      ['"t":1764000000000000', '"t":-1'],
      ['"t":1764000000000000', '"t":1.5'],
      ['"t":1764000000000000', '"t":99999999999999999'],
      ['"t":1764000000000000', '"t":1e3'],
      ['"o":"alice"', '"o":""'],
      ['"o":"alice"', '"o":"al\\qice"'],
      ['"o":"alice"', '"o":"al\\u00e9ice"'],
      ['"o":"alice"', '"o":"al\\u00zzice"'],
      ['"o":"alice"', '"o":"al\\u00e"'],
      ['"o":"alice"', '"o":"al\\/ice"'],
      ['"o":"alice"', '"o":"alice\\"'],
      ['"o":"alice"', '"o":"al\nice"'],
      ['"o":"alice"', '"o":7'],
      ['"ttl":30000', '"ttl":0'],
      ['"ttl":30000', '"ttl":-5'],
      ['"ttl":30000', '"ttl":3e4'],
      ['"ttl":30000', '"ttl":30000.'],
      ['"ttl":30000}', '"ttl":30000,"x":1}'],
      ['"freeSince":0', '"freeSince":-1'],
      ['"freeSince":0', '"freeSince":"0"'],
      ['"freeSince":0', '"freeSince":00'],
      ['{"waiters":[', '{"waiters": ['],
      ['{"waiters":[', '{"freeSince":3,"waiters":['],
      ['}],"freeSince"', '},],"freeSince"'],
      ['}],"freeSince"', '},{"t":2,"o":"bob","ttl":5}],"freeSince"'],
      ['}],"freeSince"', '}, {"t":2,"o":"bob","ttl":5}],"freeSince"'],
    ]) {
      texts.add(base.replace(from!, to!));
    }
    texts.add(`${base} `);
    texts.add(`${base}x`);
    texts.add('{"waiters":[],"freeSince":0}');
    texts.add('{"waiters":[]}');
    texts.add('[]');
    for (const text of texts) {
      expect([text, parseQueue(text)]).toEqual([text, general(text)]);
      // A text the scanner takes without building its entries is the queue the reader builds.
      const shape = scanOwnQueue(text);
      if (shape !== undefined) expect([text, shapeOfQueue(parseQueue(text))]).toEqual([text, pick(shape)]);
    }
  });

  const pick = ({ count, lastTicket, maxTicket, freeSince }: Shape): Shape => ({
    count,
    lastTicket,
    maxTicket,
    freeSince,
  });
  type Shape = Pick<NonNullable<ReturnType<typeof scanOwnQueue>>, 'count' | 'lastTicket' | 'maxTicket' | 'freeSince'>;
  const shapeOfQueue = ({ waiters, freeSince }: WaitQueue): Shape => ({
    count: waiters.length,
    lastTicket: waiters.at(-1)?.ticket ?? 0,
    maxTicket: Math.max(0, ...waiters.map((w) => w.ticket)),
    freeSince,
  });

  test('changed as text, a queue is what formatQueue writes for the same change, byte for byte', () => {
    const joining = { ticket: 1_764_000_000_000_999, owner: 'late "one"', ttlMs: 250 };
    const all = [...queues, { waiters: [], freeSince: 0 }];
    for (const queue of all) {
      const text = formatQueue(queue);
      const shape = scanOwnQueue(text)!;
      expect(pick(shape)).toEqual(shapeOfQueue(text === '' ? { waiters: [], freeSince: 0 } : queue));
      const joined = { waiters: [...queue.waiters, joining], freeSince: text === '' ? 0 : queue.freeSince };
      expect(withWaiter(text, shape, joining)).toBe(formatQueue(joined));
      if (queue.waiters.length === 0) continue;
      expect(frontWaiter(text)).toEqual(queue.waiters[0]);
      for (const freeSince of [0, queue.freeSince, 1_764_000_000_555.5]) {
        const rest = { waiters: queue.waiters.slice(1), freeSince };
        expect(withoutFront(text, shape, freeSince)).toBe(formatQueue(rest));
      }
    }
    // Own layout with no entries (formatQueue writes '' instead, but a reader must take it).
    const bare = '{"waiters":[],"freeSince":7}';
    const shape = scanOwnQueue(bare)!;
    expect(pick(shape)).toEqual({ count: 0, lastTicket: 0, maxTicket: 0, freeSince: 7 });
    expect(withWaiter(bare, shape, joining)).toBe(formatQueue({ waiters: [joining], freeSince: 7 }));
  });

  test('the text shape finds the largest ticket and the last, wherever they are', () => {
    const text = formatQueue({
      waiters: [5, 90, 7].map((ticket) => ({ ticket, owner: `w${ticket}`, ttlMs: 1 })),
      freeSince: 0,
    });
    expect(pick(scanOwnQueue(text)!)).toEqual({ count: 3, lastTicket: 7, maxTicket: 90, freeSince: 0 });
  });
});

describe('token rule', () => {
  test('max(previous + 1, wall-clock microseconds)', () => {
    expect(nextToken(0n, 1_000)).toBe(1_000_000n);
    expect(nextToken(5_000_000n, 1_000)).toBe(5_000_001n);
    expect(nextToken(999_999n, 1_000)).toBe(1_000_000n);
    expect(nextToken(1_000_000n, 1_000)).toBe(1_000_001n);
    expect(nextToken(0n, 1.5)).toBe(1_500n);
  });

  test('runs out at 2^64-1', () => {
    expect(nextToken(MAX_TOKEN - 1n, 0)).toBe(MAX_TOKEN);
    expect(nextToken(MAX_TOKEN, 0)).toBeUndefined();
  });
});

describe('JSON reader', () => {
  test('keeps number text and decodes strings like JSON.parse', () => {
    const text = '{"a":[-0.5e-3,0,12345678901234567890],"b":"\\u00e9\\n\\"\\/","__proto__":{"x":1}}';
    const value = parseJson(text) as Record<string, unknown>;
    expect((value.a as JsonNumber[]).map((n) => n.text)).toEqual(['-0.5e-3', '0', '12345678901234567890']);
    expect(value.b).toBe((JSON.parse(text) as { b: string }).b);
    expect(Object.getPrototypeOf(value)).toBe(Object.prototype);
    expect(Object.keys(value)).toEqual(['a', 'b', '__proto__']);
  });

  test.each([
    '',
    ' ',
    '{',
    '{"a":1,}',
    '[1 2]',
    '"\u0001"',
    '"\\x"',
    '01',
    '+1',
    '.5',
    'nul',
    '['.repeat(100) + ']'.repeat(100),
  ])('refuses %j', (text) => {
    expect(() => parseJson(text)).toThrow(SyntaxError);
  });
});
