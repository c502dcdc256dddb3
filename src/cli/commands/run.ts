/** `flocklease run`: a command run while holding a lease (the work is in ../run.ts). */
import { hostname } from 'node:os';
import { Option, type Command } from 'commander';
import { duration, positiveDuration, waitDuration } from '../../kernel/flags.js';
import { EXIT_HELD, EXIT_LOST } from '../../kernel/exit.js';
import { runCommand } from '../run.js';
import { DURATIONS_HELP, nonEmpty, required, verboseOption, type Context } from './common.js';

export function addRunCommand(cli: Command, { io, result }: Context): void {
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
    .addOption(verboseOption())
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
}
