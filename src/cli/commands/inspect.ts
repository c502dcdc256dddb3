/** `flocklease inspect`: every lease of a directory, its state and holder, and the leftovers. */
import type { Command } from 'commander';
import { inspectLeaseDir } from '../../flock/operator/index.js';
import { inspectionJson, inspectionText } from '../format.js';
import { EXIT, nonEmpty, verboseOption, type Context } from './common.js';

export function addInspectCommand(cli: Command, { io, result }: Context): void {
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
    .addOption(verboseOption())
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
}
