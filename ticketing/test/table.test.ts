/** The hash table used instead of Map on hot paths: a randomized differential test against Map. */
import { expect, test } from 'vitest';
import { Table } from '../src/table.js';

test('behaves like a Map under random set/get/delete, through growth and shrinking', () => {
  let seed = 7;
  const rand = (n: number): number => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return seed % n;
  };
  const table = new Table<number>();
  const model = new Map<string, number>();
  for (let step = 0; step < 200_000; step++) {
    // Phases of mostly-insert and mostly-delete make the table grow and shrink repeatedly.
    const phase = Math.floor(step / 20_000) % 2;
    const key = `k${rand(phase === 0 ? 5_000 : 50)}-${rand(3)}`;
    const op = rand(10);
    if (op < (phase === 0 ? 6 : 2)) {
      table.set(key, step);
      model.set(key, step);
    } else if (op < 8) {
      expect(table.delete(key)).toBe(model.delete(key));
    } else {
      expect(table.get(key)).toBe(model.get(key));
      expect(table.has(key)).toBe(model.has(key));
    }
    expect(table.size).toBe(model.size);
  }
  expect(table.values().sort((a, b) => a - b)).toEqual([...model.values()].sort((a, b) => a - b));
  table.clear();
  expect(table.size).toBe(0);
  expect(table.get('k1-1')).toBeUndefined();
});
