#!/usr/bin/env node
/**
 * `flocklease`: the operator CLI for a lease directory — inspect, run, prune, repair,
 * release --force. A thin layer over src/flock/operator/ (and Lease, for `run`).
 *
 * Exit codes: 0 ok · 64 usage · 65 corrupt data · 75 held / lock busy (try again) · 79 (run) the
 * lease was lost while the command ran · (run) otherwise the command's own status, 128+n if a
 * signal killed it, 126/127 if it could not be started · 1 anything else.
 */
import { readFileSync, realpathSync } from 'node:fs';
import { hostname } from 'node:os';
import { basename } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { parseDuration } from '../kernel/duration.js';
import { parseLeaseFileName } from '../flock/layout.js';
import {
  forceRelease,
  inspectLeaseDir,
  pruneLeaseDir,
  repairLease,
  DEFAULT_PRUNE_AGE_MS,
} from '../flock/operator/index.js';
import {
  LeaseCorruptError,
  LeaseHeldError,
  LeaseTimeoutError,
  LeaseTokenExhaustedError,
  LeaseUnsupportedError,
} from '../port/errors.js';
import { relative } from '../kernel/display.js';
import { inspectionJson, inspectionText, isoSeconds, pruneJson, pruneText } from './format.js';
import { EXIT_HELD, EXIT_LOST, runCommand } from './run.js';

export const EXIT = { OK: 0, FAILURE: 1, USAGE: 64, CORRUPT: 65, HELD: EXIT_HELD, LOST: EXIT_LOST } as const;

/** A usage error found after parsing (e.g. `release` without `--force`). */
class UsageError extends Error {}

export interface Io {
  stdout(text: string): void;
  stderr(text: string): void;
}

const processIo: Io = {
  stdout: (text) => void process.stdout.write(text),
  stderr: (text) => void process.stderr.write(text),
};

function duration(text: string): number {
  try {
    return parseDuration(text);
  } catch (error) {
    throw new InvalidArgumentError((error as Error).message);
  }
}

function positiveDuration(text: string): number {
  const ms = duration(text);
  if (ms <= 0) throw new InvalidArgumentError(`must be more than 0, got ${JSON.stringify(text)}`);
  return ms;
}

function waitDuration(text: string): number {
  return /^(forever|infinity|inf)$/i.test(text.trim()) ? Infinity : duration(text);
}

function nonEmpty(what: string): (text: string) => string {
  return (text) => {
    if (text === '') throw new InvalidArgumentError(`${what} must not be empty`);
    return text;
  };
}

function version(): string {
  try {
    return (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string })
      .version;
  } catch {
    return 'unknown';
  }
}

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

const DURATIONS_HELP = `Durations: 500ms, 30s, 5m, 2h (a unit is required; 0 alone is 0).`;

/** Builds the program; `result.code` is set by the command that ran. */
function program(io: Io, result: { code: number; verbose: boolean }): Command {
  const cli = new Command('flocklease')
    .description('Operate a flocklease lease directory: inspect leases, run a command under one, prune, repair, break.')
    .version(version(), '-V, --version', 'print the version')
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
  const verbose = new Option(
    '--verbose',
    'explain more on stderr; show stack traces of unexpected errors (or FLOCKLEASE_DEBUG=1)',
  );
  const lockTimeout = new Option(
    '--lock-timeout <duration>',
    "how long to wait for the id's transition lock (held for microseconds by a running operation)",
  )
    .default(10_000, '10s')
    .argParser(positiveDuration);

  cli
    .command('inspect')
    .summary('list every lease: state, owner, token, expiry, holder PID, waiters; and leftover files')
    .description(
      `List every lease in <dir>, one row each, and the leftover files.

States:
  held      unexpired, and its holder process holds its liveness flock
  crashed   unexpired, but nobody holds its liveness flock: the holder died;
            the next acquire takes over
  expired   past its expiry: the next acquire takes over (a holder still
            running reclaims it on renew if nobody did)
  released  a tombstone left by a release
  corrupt   the record cannot be read: acquires fail until \`flocklease repair\`

PID is the holder's process, from /proc/locks (Linux), where the kernel tells.
WAITERS counts the processes queued for the lease. Leftovers are files no
lease needs (prune removes them) and corrupt copies kept by repair.

Inspect reads only: it creates no file and takes no lock a lease operation
could notice (the current generation's liveness file is probed with a shared,
non-blocking flock, as acquire does).`,
    )
    .argument('<dir>', 'the lease directory')
    .option(
      '--json',
      'print a JSON array: one object per lease and per leftover, all with the same fields (token as a string)',
    )
    .option('--id <id>', 'only this session id', nonEmpty('--id'))
    .addOption(verbose)
    .addHelpText(
      'after',
      `
Examples:
  $ flocklease inspect /run/myapp/leases
  ID              STATE    OWNER    TOKEN             EXPIRY                           PID    WAITERS  NOTE
  nightly-report  held     build-7  1795949057001000  2026-11-29T10:44:57Z (in 29s)    12114  1
  session-42      crashed  agent-b  1795949057761000  2026-11-29T10:49:17Z (in 4m50s)  -      0        holder died: the next acquire takes over

  $ flocklease inspect /run/myapp/leases --id nightly-report --json | jq -r '.[0].state'
  held`,
    )
    .action((dir: string, opts: { json?: boolean; id?: string; verbose?: boolean }) => {
      result.verbose ||= opts.verbose === true;
      const inspection = inspectLeaseDir(dir, { id: opts.id });
      if (opts.json) io.stdout(`${JSON.stringify(inspectionJson(inspection), null, 2)}\n`);
      else io.stdout(inspectionText(inspection, opts.id));
      result.code = EXIT.OK;
    });

  cli
    .command('run')
    .summary('run a command while holding a lease (the lease-aware flock(1))')
    .description(
      `Acquire the lease <id> in <dir> (waiting up to --wait if it is held), run the
command with the grant in its environment, renew the lease while the command
runs, release it when the command exits, and exit with the command's status.

If the lease is lost while the command runs (an operator broke it, or it
expired while renewals kept failing and someone took it over), the command
gets SIGTERM, SIGKILL after --kill-after, and run exits ${EXIT_LOST}. The
lease is also checked once more when the command ends: if it was lost by then,
run exits ${EXIT_LOST} rather than the command's status.

The command runs in its own process group, so signals (and, on loss,
SIGTERM/SIGKILL) reach everything it started. SIGINT, SIGTERM, SIGHUP,
SIGQUIT, SIGUSR1 and SIGUSR2 sent to run are forwarded to that group. With
--foreground the command stays in the terminal's process group (for
interactive commands that need the terminal): signals then go to the command
alone, and a Ctrl-C or Ctrl-\\ typed at the terminal reaches it directly (run
does not pass it on twice).

Environment of the command:
  FLOCKLEASE_DIR      the lease directory (absolute)
  FLOCKLEASE_SESSION  the session id
  FLOCKLEASE_OWNER    the owner
  FLOCKLEASE_TOKEN    the fencing token (decimal; pass it to what you guard)
  FLOCKLEASE_EXPIRY   the expiry at the start (RFC 3339); renewed every TTL/3
  FLOCKLEASE_TTL_MS   the lease length in milliseconds

If run itself is killed with SIGKILL, the kernel frees the lease at once (the
next acquire takes over) but cannot stop the command: supervise run so that
its whole group is stopped with it (e.g. systemd's default
KillMode=control-group).`,
    )
    .option('--dir <dir>', 'the lease directory, created if missing (mode 0700) (required)', nonEmpty('--dir'))
    .option('--id <id>', 'the session id to lease (required)', nonEmpty('--id'))
    .option('--owner <owner>', 'the owner to record (default: <hostname>-<pid of run>)', nonEmpty('--owner'))
    .addOption(
      new Option('--ttl <duration>', 'lease length; renewed every ttl/3')
        .default(30_000, '30s')
        .argParser(positiveDuration),
    )
    .addOption(
      new Option(
        '--wait <duration>',
        'wait this long for a held lease (in arrival order with other waiters); "forever" waits until interrupted',
      )
        .default(0, 'do not wait')
        .argParser(waitDuration),
    )
    .addOption(
      new Option('--kill-after <duration>', 'after a loss, SIGKILL the command this long after SIGTERM')
        .default(5_000, '5s')
        .argParser(duration),
    )
    .option('--foreground', "keep the command in the terminal's process group (interactive commands)")
    .addOption(verbose)
    .argument('<command...>', 'the command and its arguments (put them after --)')
    .usage('--dir <dir> --id <id> [options] -- <command> [args...]')
    .passThroughOptions()
    .addHelpText(
      'after',
      `
${DURATIONS_HELP}

Exit codes: the command's status (128+n if signal n killed it; 126/127 if it
could not be started); ${EXIT_HELD} if the lease is held and was not obtained in
time (one line on stderr names the holder); ${EXIT_LOST} if the lease was lost
while the command ran; 64 for a usage error.

Examples:
  $ flocklease run --dir /run/myapp/leases --id nightly-report -- ./report.sh --full
  $ flocklease run --dir /run/myapp/leases --id nightly-report --wait 5m --ttl 1m -- ./report.sh
  $ flocklease run --dir /run/myapp/leases --id db-migrate -- sh -c 'migrate --fencing-token "$FLOCKLEASE_TOKEN"'
  $ flocklease run --dir /run/myapp/leases --id nightly-report -- ./report.sh
  flocklease: lease "nightly-report" is held by build-7 (pid 12114, token 1795949057001000, expires 2026-11-29T10:44:47Z, in 25s)
  $ echo $?
  75`,
    )
    .action(
      async (
        command: string[],
        opts: {
          dir?: string;
          id?: string;
          owner?: string;
          ttl: number;
          wait: number;
          killAfter: number;
          foreground?: boolean;
          verbose?: boolean;
        },
      ) => {
        result.verbose ||= opts.verbose === true;
        const dir = required(opts.dir, '--dir <dir>');
        const id = required(opts.id, '--id <id>');
        result.code = await runCommand(
          {
            dir,
            id,
            owner: opts.owner ?? `${hostname()}-${process.pid}`,
            ttlMs: opts.ttl,
            waitMs: opts.wait,
            killAfterMs: opts.killAfter,
            foreground: opts.foreground === true,
            verbose: opts.verbose === true,
            command,
          },
          { say: (line) => io.stderr(`flocklease: ${line}\n`) },
        );
      },
    );

  cli
    .command('prune')
    .summary('remove old released records and leftover files, never a live lease')
    .description(
      `Remove what finished leases left behind in <dir>:
  - released records whose release is at least --older-than ago (and expired
    records whose holder is gone, at least --older-than past their expiry);
  - liveness (.live) and waiter (.wait) files that no process holds;
  - temp files of interrupted record writes;
  - the .lock file of an id that has nothing else left.

Each id is pruned under its transition lock, as a lease operation; the .lock
file goes last, while still locked (a process that opened it just before sees
the path no longer names the file it locked, and retries). Never removed: a
held, crashed-but-unexpired or expired-but-running lease, an id with queued
waiters, a corrupt record (see repair), a corrupt copy kept by repair.

Fencing tokens stay monotone after a prune: a takeover with no record issues
max(1, wall-clock microseconds), and prune removes a record only when the
clock is already past its token. They would go backwards only if the clock
were stepped back by more than --older-than (the default keeps a day of
margin). Do not prune a directory that the Go original also uses: it takes
over with token = previous + 1.

--dry-run reads the directory without taking any lock (taking one could create
a .lock file) and prints what a prune would remove right now.`,
    )
    .argument('<dir>', 'the lease directory')
    .addOption(
      new Option('--older-than <duration>', 'minimum age of a released record (since its release) to remove it')
        .default(DEFAULT_PRUNE_AGE_MS, `${DEFAULT_PRUNE_AGE_MS / 3_600_000}h`)
        .argParser(duration),
    )
    .option('--dry-run', 'print what would be removed; change nothing')
    .option('--id <id>', 'only this session id', nonEmpty('--id'))
    .option('--json', 'print the result as JSON ({ removed, skipped, errors })')
    .addOption(lockTimeout)
    .addOption(verbose)
    .addHelpText(
      'after',
      `
${DURATIONS_HELP}

Examples:
  $ flocklease prune /run/myapp/leases --dry-run
  would remove session-7-cef8bce549cdc050.lease.json.31337-0000002a.tmp  (temp: an interrupted record write)
  left alone nightly-report: 1 queued waiter
  Dry run: would remove 1 file (0 records); 1 id left alone.
  $ flocklease prune /run/myapp/leases --older-than 1h`,
    )
    .action(
      async (
        dir: string,
        opts: {
          olderThan: number;
          dryRun?: boolean;
          id?: string;
          json?: boolean;
          lockTimeout: number;
          verbose?: boolean;
        },
      ) => {
        result.verbose ||= opts.verbose === true;
        const pruned = await pruneLeaseDir(dir, {
          olderThanMs: opts.olderThan,
          dryRun: opts.dryRun === true,
          id: opts.id,
          lockTimeoutMs: opts.lockTimeout,
        });
        io.stdout(opts.json ? `${JSON.stringify(pruneJson(pruned), null, 2)}\n` : pruneText(pruned));
        result.code = pruned.errors.length > 0 ? EXIT.FAILURE : EXIT.OK;
      },
    );

  cli
    .command('repair')
    .summary('replace a corrupt record with a tombstone (keeping a copy)')
    .description(
      `Replace the corrupt record of <id> (unparsable, or a symlink or other
non-regular file) with a tombstone whose token is greater than every token
still visible for the id (the takeover rule: max(largest + 1, wall-clock
microseconds)), so the next acquire takes over with a greater token still. The
corrupt file is kept next to it as <safeID>.corrupt-<UTC time> (inspect lists
it, prune leaves it: delete it when you are done with it). A holder that is
still running loses the lease at its next renew. A healthy or missing record
is left alone (exit 0).`,
    )
    .argument('<dir>', 'the lease directory')
    .option('--id <id>', 'the session id whose record to repair (required)', nonEmpty('--id'))
    .addOption(lockTimeout)
    .addOption(verbose)
    .addHelpText(
      'after',
      `
Examples:
  $ flocklease repair /run/myapp/leases --id session-13
  repaired "session-13": record is not valid JSON: expected } at offset 32
  kept the corrupt record as session-13-85000fd0b18dea2c.corrupt-20261129T104430150Z
  wrote a tombstone with token 1795949070150000: the next acquire takes over`,
    )
    .action(async (dir: string, opts: { id?: string; lockTimeout: number; verbose?: boolean }) => {
      result.verbose ||= opts.verbose === true;
      const repaired = await repairLease(dir, required(opts.id, '--id <id>'), { lockTimeoutMs: opts.lockTimeout });
      const id = JSON.stringify(opts.id);
      if (repaired.status === 'healthy') io.stdout(`${id}: the record is not corrupt; nothing to repair\n`);
      else if (repaired.status === 'missing') io.stdout(`${id}: no record; nothing to repair\n`);
      else {
        const problem = repaired.problem.startsWith(`${repaired.path}: `)
          ? repaired.problem.slice(repaired.path.length + 2)
          : repaired.problem;
        io.stdout(
          `repaired ${id}: ${problem}\n` +
            `kept the corrupt record as ${repaired.copy.slice(repaired.copy.lastIndexOf('/') + 1)}\n` +
            `wrote a tombstone with token ${repaired.token}: the next acquire takes over\n` +
            (repaired.stillHeldBy.length > 0
              ? `note: pid ${repaired.stillHeldBy.join(', ')} still ran as its holder; it loses the lease at its next renew\n`
              : ''),
        );
      }
      result.code = EXIT.OK;
    });

  cli
    .command('release')
    .summary('break a lease (break-glass, needs --force)')
    .description(
      `Break the lease <id>: write a tombstone with a new, greater token under the
transition lock and remove the holder's liveness file. The holder, if still
running, loses the lease at its next renew (its hold aborts; \`flocklease
run\` terminates its command and exits ${EXIT_LOST}); the next acquire takes
over with a greater token. Queued waiters take it once the old holder lets go,
or at its old expiry at the latest.

This is break-glass for an operator: a program releases its own lease through
the library (or by letting \`flocklease run\` end), so --force is required.`,
    )
    .argument('<dir>', 'the lease directory')
    .option('--id <id>', 'the session id whose lease to break (required)', nonEmpty('--id'))
    .option('--force', 'yes, break it')
    .addOption(lockTimeout)
    .addOption(verbose)
    .addHelpText(
      'after',
      `
Examples:
  $ flocklease release /run/myapp/leases --id nightly-report --force
  broke "nightly-report": it was held by build-7 (pid 12114, token 1795949057001000, expires 2026-11-29T10:44:57Z, in 29s)
  tombstone token 1795949068125000: the holder loses the lease at its next renew`,
    )
    .action(async (dir: string, opts: { id?: string; force?: boolean; lockTimeout: number; verbose?: boolean }) => {
      result.verbose ||= opts.verbose === true;
      const target = required(opts.id, '--id <id>');
      if (!opts.force) {
        throw new UsageError(
          `release needs --force: it breaks a lease that another process may be using (it loses the lease at its next renew). ` +
            `To look first: flocklease inspect ${shellQuote(dir)} --id ${shellQuote(target)}`,
        );
      }
      const released = await forceRelease(dir, target, { lockTimeoutMs: opts.lockTimeout });
      const id = JSON.stringify(opts.id);
      if (released.status === 'missing') io.stdout(`${id}: no record; nothing to release\n`);
      else if (released.status === 'already-released')
        io.stdout(`${id}: already released (token ${released.token}); nothing to do\n`);
      else {
        const { previous, pid } = released;
        const who =
          previous.state === 'held'
            ? 'held by'
            : previous.state === 'crashed'
              ? 'recorded (holder dead) for'
              : 'expired, last held by';
        io.stdout(
          `broke ${id}: it was ${who} ${previous.owner} (${pid === undefined ? '' : `pid ${pid}, `}token ${previous.token}, ` +
            `expires ${isoSeconds(previous.expiry)}, ${relative(previous.expiry.getTime(), Date.now())})\n` +
            `tombstone token ${released.token}: ${previous.state === 'held' ? 'the holder loses the lease at its next renew' : 'the next acquire takes over'}\n`,
        );
      }
      result.code = EXIT.OK;
    });

  return cli;
}

/** Options the command cannot do without. (Checked here, not with commander's requiredOption, so
 * that an unknown option is reported as such rather than as a missing required one.) */
function required(value: string | undefined, flag: string): string {
  if (value === undefined) throw new UsageError(`required option '${flag}' not specified (add --help for usage)`);
  return value;
}

function shellQuote(text: string): string {
  return /^[A-Za-z0-9_.,:/@%+=-]+$/.test(text) ? text : `'${text.replace(/'/g, `'\\''`)}'`;
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
