// Command-line durations (both CLIs parse with parseDuration): a unit is required.
import { describe, expect, test } from 'vitest';
import { parseDuration } from '../src/kernel/duration.js';

describe('parseDuration', () => {
  test('units; 0 alone; a bare number is refused with a hint', () => {
    expect([
      parseDuration('500ms'),
      parseDuration('30s'),
      parseDuration('1.5m'),
      parseDuration('2h'),
      parseDuration('0'),
    ]).toEqual([500, 30_000, 90_000, 7_200_000, 0]);
    expect(() => parseDuration('10')).toThrow(
      new RangeError('duration "10" has no unit: write 10s or 10ms (units: ms, s, m, h)'),
    );
    expect(() => parseDuration('10x')).toThrow(RangeError);
  });
});
