/** `flocklease prune`: remove what finished leases left behind. */
import { Option, type Command } from 'commander';
import { DEFAULT_PRUNE_AGE_MS, pruneLeaseDir } from '../../flock/operator/index.js';
import { duration } from '../../kernel/flags.js';
import { pruneJson, pruneText } from '../format.js';
import { DURATIONS_HELP, EXIT, lockTimeoutOption, nonEmpty, verboseOption, type Context } from './common.js';

export function addPruneCommand(cli: Command, { io, result }: Context): void {
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
    .addOption(lockTimeoutOption())
    .addOption(verboseOption())
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
}
