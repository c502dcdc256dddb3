/** `flocklease release --force`: break a lease (break-glass). */
import type { Command } from 'commander';
import { forceRelease } from '../../flock/operator/index.js';
import { EXIT_LOST } from '../../kernel/exit.js';
import { relative } from '../../kernel/display.js';
import { isoSeconds } from '../format.js';
import {
  EXIT,
  lockTimeoutOption,
  nonEmpty,
  required,
  shellQuote,
  UsageError,
  verboseOption,
  type Context,
} from './common.js';

export function addReleaseCommand(cli: Command, { io, result }: Context): void {
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
    .addOption(lockTimeoutOption())
    .addOption(verboseOption())
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
}
