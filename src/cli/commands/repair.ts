/** `flocklease repair`: replace a corrupt record with a tombstone. */
import type { Command } from 'commander';
import { repairLease } from '../../flock/operator/index.js';
import { EXIT, lockTimeoutOption, nonEmpty, required, verboseOption, type Context } from './common.js';

export function addRepairCommand(cli: Command, { io, result }: Context): void {
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
    .addOption(lockTimeoutOption())
    .addOption(verboseOption())
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
}
