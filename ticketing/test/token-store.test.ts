/** The --state-file high-water mark: reserve ahead, top up in the background, never go back. */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, test } from 'vitest';
import { TokenStore, formatStateFile, parseStateFile } from '../src/token-store.js';

const fileIn = (): string => join(mkdtempSync(join(tmpdir(), 'ticketing-tokens-')), 'tokens.json');
const markIn = (path: string): bigint => parseStateFile(readFileSync(path, 'utf8'), path);

test('a first start reserves ahead of the clock; a restart starts above the mark', () => {
  const path = fileIn();
  const now = 1_800_000_000_000;
  const store = TokenStore.open(path, { reserveMs: 1_000, clock: () => now });
  expect(store.floor).toBe(0n);
  expect(store.durable).toBe(BigInt(now) * 1000n + 1_000_000n);
  expect(markIn(path)).toBe(store.durable);
  const again = TokenStore.open(path, { reserveMs: 1_000, clock: () => now - 3_600_000 });
  expect(again.floor).toBe(store.durable);
  expect(again.durable).toBe(store.durable + 1_000_000n);
});

test('cover writes synchronously only past the durable mark', () => {
  const path = fileIn();
  const now = 1_800_000_000_000;
  const store = TokenStore.open(path, { reserveMs: 1_000, clock: () => now });
  const durable = store.durable;
  store.cover(durable);
  expect(markIn(path)).toBe(durable);
  store.cover(durable + 5n);
  expect(store.durable).toBe(durable + 5n + 1_000_000n);
  expect(markIn(path)).toBe(store.durable);
});

test('the background top-up runs when less than half the reservation is left', async () => {
  const path = fileIn();
  let now = 1_800_000_000_000;
  const store = TokenStore.open(path, { reserveMs: 1_000, clock: () => now });
  const first = store.durable;
  store.topUp(0n);
  await store.settle();
  expect(store.durable).toBe(first); // plenty left: nothing written
  now += 600; // 400 ms of reservation left
  store.topUp(0n);
  await store.settle();
  expect(store.durable).toBe(BigInt(now) * 1000n + 1_000_000n);
  expect(markIn(path)).toBe(store.durable);
});

test('a slower background write never lowers a higher mark written meanwhile', async () => {
  const path = fileIn();
  let now = 1_800_000_000_000;
  const store = TokenStore.open(path, { reserveMs: 1_000, clock: () => now });
  now += 900;
  store.topUp(0n); // async write of a lower mark in flight
  const high = store.durable + 50_000_000n;
  store.cover(high); // synchronous, higher
  await store.settle();
  expect(store.durable >= high).toBe(true);
  expect(markIn(path)).toBe(store.durable);
});

test('the file format is strict', () => {
  expect(parseStateFile(formatStateFile(123n), 'f')).toBe(123n);
  expect(() => parseStateFile('{"version":2,"highWater":"1"}', 'f')).toThrow(/not a ticketing state file/);
  expect(() => parseStateFile('{"version":1,"highWater":1}', 'f')).toThrow(/not a ticketing state file/);
  expect(() => parseStateFile('{"version":1,"highWater":"18446744073709551616"}', 'f')).toThrow(
    /not a ticketing state file/,
  );
  const path = fileIn();
  writeFileSync(path, '');
  expect(() => TokenStore.open(path)).toThrow(/not valid JSON/);
});
