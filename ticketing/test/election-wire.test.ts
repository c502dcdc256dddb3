import { describe, expect, it } from 'vitest';
import { formatView, MAX_VALUE_BYTES, viewHead } from '../src/election-wire.js';
import { parseReply, parseRequest, RequestReader } from '../src/protocol.js';

const read = (line: string) => {
  const buf = Buffer.from(line, 'latin1');
  const r = new RequestReader().read(buf, 0, buf.length);
  return { op: r.op, key: r.key, token: r.token, value: r.value, detail: r.detail };
};

describe('the election lines', () => {
  it('parses P with a value that has spaces, O and U', () => {
    expect(parseRequest('P svc 17 10.0.0.5:8080 zone a')).toEqual({
      op: 'P',
      key: 'svc',
      token: 17n,
      tokenText: '17',
      value: '10.0.0.5:8080 zone a',
    });
    expect(read('P svc 17 x y')).toMatchObject({ op: 'P', key: 'svc', token: 17n, value: 'x y' });
    expect(read('O svc')).toMatchObject({ op: 'O', key: 'svc' });
    expect(read('U svc')).toMatchObject({ op: 'U', key: 'svc' });
  });

  it('refuses malformed requests with a detail', () => {
    for (const [line, detail] of [
      ['P svc 17', /P takes 3 fields/],
      ['P svc 017 v', /token/],
      ['P svc 17 ', /value/],
      [`P svc 17 ${'v'.repeat(MAX_VALUE_BYTES + 1)}`, /value/],
      ['P svc 17 caf\u00e9', /value/],
      ['O', /O takes 1 field/],
      ['O a b', /O takes 1 field/],
      ['U ', /key/],
    ] as const) {
      const parsed = parseRequest(line);
      expect(parsed.op, line).toBe('error');
      expect((parsed as { detail: string }).detail, line).toMatch(detail);
    }
  });

  it('formats and parses every kind of view', () => {
    const lines = [
      formatView('k', 5n, { holders: 0 }),
      formatView('k', 6n, { holders: 1, token: '9', owner: 'w1', value: undefined }),
      formatView('k', 7n, { holders: 1, token: '9', owner: 'w1', value: ' a  b ' }),
      formatView('k', 8n, { holders: 'many', count: 3 }),
    ];
    expect(lines).toEqual(['V k 5 -\n', 'V k 6 9 w1\n', 'V k 7 9 w1  a  b \n', 'V k 8 *3\n']);
    expect(lines.map((line) => parseReply(line.slice(0, -1)))).toEqual([
      { op: 'V', key: 'k', rev: '5', view: { holders: 0 } },
      { op: 'V', key: 'k', rev: '6', view: { holders: 1, token: '9', owner: 'w1', value: undefined } },
      { op: 'V', key: 'k', rev: '7', view: { holders: 1, token: '9', owner: 'w1', value: ' a  b ' } },
      { op: 'V', key: 'k', rev: '8', view: { holders: 'many', count: 3 } },
    ]);
    expect(lines.map(viewHead)).toEqual([5n, 6n, 7n, 8n].map((rev) => ({ key: 'k', rev })));
    expect(parseReply('P 9 k')).toEqual({ op: 'P', token: '9', key: 'k' });
    expect(parseReply('U k')).toEqual({ op: 'U', key: 'k', busy: false });
    expect(parseReply('U k busy')).toEqual({ op: 'U', key: 'k', busy: true });
    for (const bad of ['V k 01 -', 'V k 5', 'V k 5 *0', 'V k 5 x w', 'U k idle', 'P 09 k', 'V k 5 - x'])
      expect(parseReply(bad), bad).toBeUndefined();
  });
});
