// Command-line durations (both CLIs parse with parseDuration): a unit is required.
import { InvalidArgumentError } from 'commander';
import { describe, expect, test } from 'vitest';
import { durationText, parseDuration } from '../src/kernel/duration.js';
import { positiveDuration, timerDuration, waitDuration } from '../src/kernel/flags.js';

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

describe("the CLIs' shared flag parsers (src/kernel/flags.ts)", () => {
  test('a wait is a duration of 0 or more, or forever (also infinity, inf): Infinity', () => {
    expect(['0', '250ms', 'forever', 'FOREVER', 'infinity', 'inf'].map(waitDuration)).toEqual([
      0,
      250,
      Infinity,
      Infinity,
      Infinity,
      Infinity,
    ]);
    expect(() => waitDuration('forevr')).toThrow(InvalidArgumentError);
    expect(() => waitDuration('10')).toThrow(/has no unit/);
  });

  test('a positive duration refuses 0; a timer duration also refuses more than 24 days', () => {
    expect(() => positiveDuration('0s')).toThrow(new InvalidArgumentError('must be more than 0, got "0s"'));
    expect(timerDuration('24h')).toBe(86_400_000);
    expect(() => timerDuration('600h')).toThrow(/at most 24 days/);
    expect(() => timerDuration('0')).toThrow(/positive duration/);
  });

  test('a default is shown in its largest whole unit', () => {
    expect([3_600_000, 90_000, 30_000, 1_500, 0.5].map(durationText)).toEqual(['1h', '90s', '30s', '1500ms', '0.5ms']);
  });
});
