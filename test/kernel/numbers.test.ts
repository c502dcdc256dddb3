import { describe, expect, it } from 'vitest';
import { checkNumber, checkOptionalNumber } from '../../src/kernel/numbers.js';
import { MAX_TOKEN, TOKEN_RESERVE_MS, markAhead, nextToken, reservationLow } from '../../src/kernel/token.js';
import { MAX_TIMER_MS, timerDelay } from '../../src/kernel/timers.js';

describe('checkNumber', () => {
  it('accepts finite positive numbers and returns them', () => {
    expect(checkNumber(1.5, 'x')).toBe(1.5);
    expect(checkNumber(0, 'x', { zero: true })).toBe(0);
    expect(checkNumber(7, 'x', { integer: true, max: 7 })).toBe(7);
    expect(checkOptionalNumber(undefined, 'x')).toBeUndefined();
  });
  it('refuses with a typed error naming the option', () => {
    expect(() => checkNumber('1', 'ttlMs')).toThrow(new TypeError('ttlMs must be a number, got string'));
    for (const bad of [0, -1, Number.NaN, Infinity, -Infinity]) {
      expect(() => checkNumber(bad, 'ttlMs')).toThrow(RangeError);
    }
    expect(() => checkNumber(-1, 'n', { zero: true })).toThrow(/n must be a finite number, 0 or more, got -1/);
    expect(() => checkNumber(1.5, 'n', { integer: true })).toThrow(/n must be an integer/);
    expect(() => checkNumber(8, 'n', { max: 7 })).toThrow(/n must be at most 7, got 8/);
    expect(() => checkOptionalNumber(null, 'n')).toThrow(TypeError);
  });
});

describe('nextToken', () => {
  it('is max(previous + 1, wall-clock microseconds), and undefined at 2^64-1', () => {
    expect(nextToken(0n, 1_000)).toBe(1_000_000n);
    expect(nextToken(5_000_000n, 1_000)).toBe(5_000_001n);
    expect(nextToken(MAX_TOKEN - 1n, 0)).toBe(MAX_TOKEN);
    expect(nextToken(MAX_TOKEN, 0)).toBeUndefined();
  });
});

describe('the token reservation', () => {
  const RESERVE = BigInt(TOKEN_RESERVE_MS) * 1000n; // 60 s worth of µs tokens
  it('reserves ahead of the greater of the last token and the clock, never past 2^64-1', () => {
    expect(markAhead(0n, 1_000, RESERVE)).toBe(1_000_000n + RESERVE);
    expect(markAhead(5_000_000n, 1_000, RESERVE)).toBe(5_000_000n + RESERVE);
    expect(markAhead(MAX_TOKEN - 1n, 0, RESERVE)).toBe(MAX_TOKEN);
  });
  it('is low once less than half of it is left', () => {
    const mark = markAhead(0n, 1_000, RESERVE);
    expect(reservationLow(mark, 0n, 1_000, RESERVE)).toBe(false);
    expect(reservationLow(mark, 0n, 1_000 + TOKEN_RESERVE_MS / 2, RESERVE)).toBe(false); // exactly half left
    expect(reservationLow(mark, 0n, 1_000 + TOKEN_RESERVE_MS / 2 + 1, RESERVE)).toBe(true); // the clock moved on
    expect(reservationLow(mark, mark - RESERVE / 2n + 1n, 1_000, RESERVE)).toBe(true); // tokens used it up
  });
});

describe('timerDelay', () => {
  it('clamps to [0, 2^31-1]', () => {
    expect(timerDelay(-5)).toBe(0);
    expect(timerDelay(Infinity)).toBe(MAX_TIMER_MS);
    expect(timerDelay(10)).toBe(10);
  });
});
