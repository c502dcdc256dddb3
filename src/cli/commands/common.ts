/** What the `flocklease` commands share: their output, their result, the exit codes, common options. */
import { InvalidArgumentError, Option } from 'commander';
import { EXIT_HELD, EXIT_LOST } from '../../kernel/exit.js';
import { EXIT_USAGE, positiveDuration } from '../../kernel/flags.js';

export const EXIT = { OK: 0, FAILURE: 1, USAGE: EXIT_USAGE, CORRUPT: 65, HELD: EXIT_HELD, LOST: EXIT_LOST } as const;

/** A usage error found after parsing (e.g. `release` without `--force`). */
export class UsageError extends Error {}

export interface Io {
  stdout(text: string): void;
  stderr(text: string): void;
}

/** What a command is given: where it writes, and where it sets its exit code. */
export interface Context {
  readonly io: Io;
  readonly result: { code: number; verbose: boolean };
}

export const DURATIONS_HELP = `Durations: 500ms, 30s, 5m, 2h (a unit is required; 0 alone is 0).`;

export function nonEmpty(what: string): (text: string) => string {
  return (text) => {
    if (text === '') throw new InvalidArgumentError(`${what} must not be empty`);
    return text;
  };
}

export function verboseOption(): Option {
  return new Option(
    '--verbose',
    'explain more on stderr; show stack traces of unexpected errors (or FLOCKLEASE_DEBUG=1)',
  );
}

export function lockTimeoutOption(): Option {
  return new Option(
    '--lock-timeout <duration>',
    "how long to wait for the id's transition lock (held for microseconds by a running operation)",
  )
    .default(10_000, '10s')
    .argParser(positiveDuration);
}

/** Options the command cannot do without. (Checked here, not with commander's requiredOption, so
 * that an unknown option is reported as such rather than as a missing required one.) */
export function required(value: string | undefined, flag: string): string {
  if (value === undefined) throw new UsageError(`required option '${flag}' not specified (add --help for usage)`);
  return value;
}

export function shellQuote(text: string): string {
  return /^[A-Za-z0-9_.,:/@%+=-]+$/.test(text) ? text : `'${text.replace(/'/g, `'\\''`)}'`;
}
