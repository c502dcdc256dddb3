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
  // Plain comparisons in the loop (an expect() per step cost most of the test's time); the first
  // difference fails the test with the step, the operation and both answers.
  const same = (step: number, what: string, got: unknown, want: unknown): void => {
    if (got !== want) expect(got, `step ${step}: ${what}`).toBe(want);
  };
  for (let step = 0; step < 200_000; step++) {
    // Phases of mostly-insert and mostly-delete make the table grow and shrink repeatedly.
    const phase = Math.floor(step / 20_000) % 2;
    const key = `k${rand(phase === 0 ? 5_000 : 50)}-${rand(3)}`;
    const op = rand(10);
    if (op < (phase === 0 ? 6 : 2)) {
      table.set(key, step);
      model.set(key, step);
    } else if (op < 8) {
      same(step, `delete ${key}`, table.delete(key), model.delete(key));
    } else {
      same(step, `get ${key}`, table.get(key), model.get(key));
      same(step, `has ${key}`, table.has(key), model.has(key));
    }
    same(step, 'size', table.size, model.size);
  }
  expect(table.values().sort((a, b) => a - b)).toEqual([...model.values()].sort((a, b) => a - b));
  table.clear();
  expect(table.size).toBe(0);
  expect(table.get('k1-1')).toBeUndefined();
});
