/** Durations on command lines: `500ms`, `30s`, `5m`, `2h`. A unit is required: a bare `10` could
 * mean seconds as well as milliseconds (only `0` means the same in every unit). */

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
const DURATION = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/;

/** Milliseconds, or a RangeError that quotes the input. */
export function parseDuration(text: string): number {
  const m = DURATION.exec(text.trim());
  if (m === null) throw new RangeError(`invalid duration ${JSON.stringify(text)}: use e.g. 500ms, 30s, 5m`);
  if (m[2] === undefined && Number(m[1]) !== 0) {
    throw new RangeError(
      `duration ${JSON.stringify(text)} has no unit: write ${m[1]}s or ${m[1]}ms (units: ms, s, m, h)`,
    );
  }
  const ms = Number(m[1]) * UNITS[m[2] ?? 'ms']!; // no unit: `0`
  if (!Number.isFinite(ms)) throw new RangeError(`duration ${JSON.stringify(text)} is too large`);
  return ms;
}

/** A duration as a person would type it, in its largest whole unit (`30s`, not `30000`). */
export function durationText(ms: number): string {
  const [unit, size] = Object.entries(UNITS)
    .sort(([, a], [, b]) => b - a)
    .find(([, size]) => ms % size === 0) ?? ['ms', 1];
  return `${ms / size}${unit}`;
}
