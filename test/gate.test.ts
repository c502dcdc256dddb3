// The in-process gate (src/flock/gate.ts): one operation per key at a time, in call order, and
// keys whose operations have all left count as free however many keys it has kept or swept.
import { describe, expect, test } from 'vitest';
import { KeyedGate } from '../src/flock/gate.js';

describe('KeyedGate', () => {
  test('entrants of one key go one at a time in call order; other keys do not wait', async () => {
    const gate = new KeyedGate();
    const order: string[] = [];
    const first = gate.tryEnter('a')!;
    expect(first).toBeTypeOf('function');
    expect(gate.tryEnter('a')).toBeUndefined();
    const second = gate.enter('a').then((leave) => (order.push('second'), leave));
    const third = gate.enter('a').then((leave) => (order.push('third'), leave));
    const other = gate.tryEnter('b');
    expect(other).toBeTypeOf('function');
    expect(gate.size).toBe(2);
    await new Promise((resolve) => setImmediate(resolve));
    expect(order).toEqual([]);
    first();
    (await second)();
    (await third)();
    other!();
    expect(order).toEqual(['second', 'third']);
    expect(gate.size).toBe(0);
    expect(gate.isFree('a') && gate.isFree('b')).toBe(true);
  });

  test('an entrant abandoned while queued passes its turn on in order', async () => {
    const gate = new KeyedGate();
    const first = gate.tryEnter('a')!;
    const controller = new AbortController();
    const abandoned = gate.enter('a', controller.signal);
    const after = gate.enter('a');
    controller.abort(new Error('gave up'));
    await expect(abandoned).rejects.toThrow('gave up');
    let entered = false;
    void after.then(() => (entered = true));
    await new Promise((resolve) => setImmediate(resolve));
    expect(entered).toBe(false);
    first();
    (await after)();
    expect(gate.size).toBe(0);
    expect(gate.isFree('a')).toBe(true);
  });

  test('hundreds of keys entered and left: all free, none counted, and each still gated', async () => {
    const gate = new KeyedGate();
    for (let round = 0; round < 3; round++) {
      for (let i = 0; i < 300; i++) gate.tryEnter(`k${i}`)!();
      expect(gate.size).toBe(0);
    }
    for (let i = 0; i < 300; i++) expect(gate.isFree(`k${i}`)).toBe(true);
    // A key kept from before, and one swept since, both gate again.
    const kept = gate.tryEnter('k299')!;
    const swept = gate.tryEnter('k0')!;
    expect(gate.isFree('k299') || gate.isFree('k0')).toBe(false);
    expect(gate.tryEnter('k299')).toBeUndefined();
    expect(gate.size).toBe(2);
    const next = gate.enter('k0');
    swept();
    (await next)();
    kept();
    expect(gate.size).toBe(0);
  });
});
