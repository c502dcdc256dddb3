/**
 * The flag parsers both CLIs share (`flocklease`, `ticketing`): a bad value is a usage error (exit
 * 64) that says what was expected. The one file of the kernel that needs more than Node: commander,
 * which both packages' CLIs are built on (Ticketing imports it as `#kernel/flags`, so its library
 * never loads it).
 */
import { readFileSync } from 'node:fs';
import { InvalidArgumentError, Option } from 'commander';
import { durationText, parseDuration } from './duration.js';
import { MAX_TIMER_MS } from './timers.js';

/** Bad flags or values (sysexits EX_USAGE). */
export const EXIT_USAGE = 64;

/** A duration of 0 or more: `500ms`, `30s`, `5m`, `2h`. */
export function duration(text: string): number {
  try {
    return parseDuration(text);
  } catch (error) {
    throw new InvalidArgumentError((error as Error).message);
  }
}

/** A duration of more than 0. */
export function positiveDuration(text: string): number {
  const ms = duration(text);
  if (ms <= 0) throw new InvalidArgumentError(`must be more than 0, got ${JSON.stringify(text)}`);
  return ms;
}

/** A duration of more than 0 that one timer can wait (at most ~24 days). */
export function timerDuration(text: string): number {
  const ms = duration(text);
  if (!(ms > 0) || ms > MAX_TIMER_MS)
    throw new InvalidArgumentError('expected a positive duration of at most 24 days, e.g. 500ms, 30s');
  return ms;
}

/** A `--wait`: a duration of 0 or more, or `forever` (also `infinity`, `inf`): Infinity. */
export function waitDuration(text: string): number {
  return /^(forever|infinity|inf)$/i.test(text.trim()) ? Infinity : duration(text);
}

/** An option taking a timer duration, its default shown as a duration. */
export function durationOption(flags: string, description: string, defaultMs: number): Option {
  return new Option(flags, description).argParser(timerDuration).default(defaultMs, durationText(defaultMs));
}

/** The version of the package this file is compiled into (each package builds the kernel into its
 * own dist/kernel, two levels below its package.json, as src/kernel is). */
export function packageVersion(): string {
  try {
    return (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string })
      .version;
  } catch {
    return 'unknown';
  }
}
