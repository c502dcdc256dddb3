#!/usr/bin/env node
/**
 * `flocklease`: the operator CLI for a lease directory — inspect, run, prune, repair,
 * release --force (one file each in commands/). A thin layer over src/flock/operator/ (and Lease,
 * for `run`).
 *
 * Exit codes: 0 ok · 64 usage · 65 corrupt data · 75 held / lock busy (try again) · 79 (run) the
 * lease was lost while the command ran · (run) otherwise the command's own status, 128+n if a
 * signal killed it, 126/127 if it could not be started · 1 anything else.
 */
import { realpathSync } from 'node:fs';
import { basename } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Command, CommanderError } from 'commander';
import { parseLeaseFileName } from '../flock/layout.js';
import { packageVersion } from '../kernel/flags.js';
import {
  LeaseCorruptError,
  LeaseHeldError,
  LeaseTimeoutError,
  LeaseTokenExhaustedError,
  LeaseUnsupportedError,
} from '../port/errors.js';
import { DURATIONS_HELP, EXIT, UsageError, type Io } from './commands/common.js';
import { addInspectCommand } from './commands/inspect.js';
import { addPruneCommand } from './commands/prune.js';
import { addReleaseCommand } from './commands/release.js';
import { addRepairCommand } from './commands/repair.js';
import { addRunCommand } from './commands/run.js';

const processIo: Io = {
  stdout: (text) => void process.stdout.write(text),
  stderr: (text) => void process.stderr.write(text),
};

const EXIT_CODES_HELP = `
Exit codes:
  0   success
  64  usage error (bad flags or durations)
  65  corrupt data: a lease record that cannot be read (see \`flocklease repair\`)
  75  the lease is held by someone else, or its transition lock stayed busy:
      try again later
  79  run: the lease was lost while the command ran (the command was terminated)
  1   any other failure (an I/O error, a missing directory...)
  run also exits with the command's own status: its exit code, 128+n if
  signal n killed it, 126 if it could not be executed, 127 if not found.`;

/** Builds the program; `result.code` is set by the command that ran. */
function program(io: Io, result: { code: number; verbose: boolean }): Command {
  const cli = new Command('flocklease')
    .description('Operate a flocklease lease directory: inspect leases, run a command under one, prune, repair, break.')
    .version(packageVersion(), '-V, --version', 'print the version')
    .helpOption('-h, --help', 'show help (every command has its own, with examples)')
    .enablePositionalOptions()
    .exitOverride()
    .showHelpAfterError('(add --help for usage)')
    .configureOutput({
      writeOut: (text) => io.stdout(text),
      writeErr: (text) => io.stderr(text),
      outputError: (text, write) => write(`flocklease: ${text.replace(/^error: /, '')}`),
    })
    .addHelpText(
      'after',
      `
${DURATIONS_HELP}
${EXIT_CODES_HELP}

Examples:
  $ flocklease inspect /run/myapp/leases
  $ flocklease run --dir /run/myapp/leases --id nightly-report --wait 5m -- ./report.sh
  $ flocklease prune /run/myapp/leases --older-than 168h
  $ flocklease repair /run/myapp/leases --id session-42
  $ flocklease release /run/myapp/leases --id session-42 --force`,
    );
  const context = { io, result };
  addInspectCommand(cli, context);
  addRunCommand(cli, context);
  addPruneCommand(cli, context);
  addRepairCommand(cli, context);
  addReleaseCommand(cli, context);
  return cli;
}

/** A record that cannot be read (unparsable, a symlink, not a regular file) is what `repair` fixes:
 * say so, whichever check found it. */
function withRepairHint(error: LeaseCorruptError): string {
  const isRecord = parseLeaseFileName(basename(error.path))?.kind === 'record';
  return isRecord && !error.message.includes('flocklease repair')
    ? `${error.message} (see \`flocklease repair\`)`
    : error.message;
}

/** Maps an error to an exit code and one line (a stack too when verbose). */
function failure(error: unknown, io: Io, verbose: boolean): number {
  const message = error instanceof Error ? error.message : String(error);
  const say = (code: number, text = message): number => {
    io.stderr(`flocklease: ${text}\n`);
    if (verbose && error instanceof Error && error.stack) io.stderr(`${error.stack}\n`);
    return code;
  };
  if (error instanceof UsageError) return say(EXIT.USAGE);
  if (error instanceof LeaseCorruptError) return say(EXIT.CORRUPT, withRepairHint(error));
  if (error instanceof LeaseHeldError || error instanceof LeaseTimeoutError) return say(EXIT.HELD);
  if (error instanceof LeaseTokenExhaustedError || error instanceof LeaseUnsupportedError) return say(EXIT.FAILURE);
  // Arguments the library refused before touching anything (e.g. an id with a lone surrogate).
  if (error instanceof TypeError || error instanceof RangeError)
    return say(EXIT.USAGE, `${message} (add --help for usage)`);
  const code = (error as NodeJS.ErrnoException).code;
  if (typeof code === 'string') return say(EXIT.FAILURE);
  return say(EXIT.FAILURE, `unexpected error: ${message}${verbose ? '' : ' (--verbose shows the stack)'}`);
}

/** Runs the CLI on `argv` (without node and the script) and returns the exit code. */
export async function main(argv: readonly string[], io: Io = processIo): Promise<number> {
  const result = { code: EXIT.OK as number, verbose: process.env.FLOCKLEASE_DEBUG === '1' };
  const cli = program(io, result);
  try {
    await cli.parseAsync(argv, { from: 'user' });
    return result.code;
  } catch (error) {
    if (error instanceof CommanderError) {
      // --help and --version end here with exit code 0; parse errors were printed already.
      if (error.code === 'commander.helpDisplayed' || error.code === 'commander.version') return EXIT.OK;
      return EXIT.USAGE;
    }
    return failure(error, io, result.verbose);
  }
}

// Run when executed as the `flocklease` bin (npm links it as a symlink), not when imported.
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(realpathOr(process.argv[1])).href) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (error: unknown) => {
      process.stderr.write(`flocklease: unexpected error: ${String(error)}\n`);
      process.exit(EXIT.FAILURE);
    },
  );
}

function realpathOr(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return path;
  }
}
