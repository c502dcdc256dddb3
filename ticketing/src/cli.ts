#!/usr/bin/env node
/**
 * The `ticketing` command: `serve` (cli/serve.ts), `inspect` (the locks a server holds, from its
 * HTTP endpoint), `run` (a command run while holding a key, run.ts) and `leader` (a key's holder
 * and its published value, once or as it changes: cli/leader.ts).
 * Exit codes (as `flocklease`'s): 0 ok, 64 usage error, 1 any other failure; `run` adds its own.
 */
import { readFileSync } from 'node:fs';
import { Command, CommanderError, Option } from 'commander';
import { EXIT_HELD, EXIT_LOST } from '#kernel';
import { fetchLocks, locksText } from './inspect.js';
import { MAX_PERMITS } from './modes.js';
import { MAX_LIMIT } from './observe/http.js';
import { DEFAULT_LOCKS_LIMIT } from './server/server.js';
import { durationOption, EXIT_USAGE, packageVersion, timerDuration, waitDuration } from '#kernel/flags';
import { addClientFlags, clientOptions } from './cli/client-flags.js';
import { advertiseAddress, integer, keyName, publishedValue, readSecretFile } from './cli/flags.js';
import { addLeaderCommand } from './cli/leader.js';
import { addServeCommand } from './cli/serve.js';

export function main(argv: readonly string[]): void {
  const program = new Command('ticketing')
    .description('Ticketing: a TCP lock server with leases and fencing tokens')
    .version(packageVersion(), '-V, --version', 'print the version')
    .enablePositionalOptions()
    .exitOverride()
    .showHelpAfterError('(add --help for usage)')
    .configureOutput({ outputError: (text, write) => write(`ticketing: ${text.replace(/^error: /, '')}`) })
    .addHelpText(
      'after',
      '\nDurations: 500ms, 30s, 5m, 2h.\nExit codes: 0 success, 64 usage error (bad flags), 1 any other failure.',
    );
  addServeCommand(program);
  program
    .command('inspect')
    .description("list the keys a server holds, from its HTTP endpoint's /v1/locks")
    .requiredOption('--http <host:port>', "the server's --http address", advertiseAddress)
    .option('--secret-file <path>', "file holding the server's shared secret (sent as a bearer token)")
    .option('--tls-ca <path>', "ask over HTTPS, trusting this CA certificate (PEM), or 'system': Node's default CAs")
    .option('--prefix <prefix>', 'only keys that start with this')
    .option('--limit <n>', 'at most this many keys', integer(1, MAX_LIMIT), DEFAULT_LOCKS_LIMIT)
    .addOption(durationOption('--timeout <dur>', 'give up after this long', 5_000))
    .option('--json', "print the endpoint's JSON array (tokens as strings)")
    .addHelpText(
      'after',
      '\nExit codes: 0 success (also when nothing is held), 64 usage error, 1 any other failure\n' +
        '(unreachable, refused: a wrong or missing secret, a follower or a node not serving).',
    )
    .action(async (flags: Record<string, unknown>) => {
      const result = await fetchLocks({
        address: flags.http as string,
        secret: flags.secretFile === undefined ? undefined : readSecretFile(flags.secretFile as string),
        ca: flags.tlsCa === undefined || flags.tlsCa === 'system' ? flags.tlsCa : readFileSync(flags.tlsCa as string),
        prefix: flags.prefix as string | undefined,
        limit: flags.limit as number,
        timeoutMs: flags.timeout as number,
      });
      if (!result.ok) throw new Error(result.why);
      process.stdout.write(
        flags.json === true
          ? result.body
          : locksText(result.rows, flags.prefix as string | undefined, flags.limit as number),
      );
    });
  addClientFlags(
    program
      .command('run')
      .description(
        'run a command while holding a key: keep it alive, release when the command exits, exit with its status; on loss SIGTERM (then SIGKILL) its process group before the lease can pass on',
      ),
  )
    .requiredOption('--key <key>', 'the key to hold', keyName)
    .addOption(
      new Option('--wait <dur>', 'wait this long for a held key (0: do not wait; forever: until interrupted)')
        .argParser(waitDuration)
        .default(0, '0s'),
    )
    .addOption(
      new Option('--permits <n>', 'hold one of N permits (a semaphore of N, 1-65535)').argParser(
        integer(1, MAX_PERMITS),
      ),
    )
    .addOption(new Option('--shared', 'hold the key shared (with other shared holders)').conflicts('permits'))
    .addOption(
      new Option(
        '--publish <value>',
        'once the key is held, publish this value for its observers (leader election: where the command serves; 1-512 bytes of printable ASCII)',
      )
        .argParser(publishedValue)
        .conflicts(['permits', 'shared']),
    )
    .addOption(
      new Option(
        '--kill-after <dur>',
        'after a loss, SIGKILL this long after SIGTERM (default: a tenth of the lease)',
      ).argParser(timerDuration),
    )
    .argument('<command...>', 'the command and its arguments (after --)')
    .passThroughOptions()
    .addHelpText(
      'after',
      `\nThe command gets TICKETING_KEY and TICKETING_TOKEN (the fencing token) in its environment,\nand TICKETING_SLOT (0…N-1) with --permits.\nExit codes: the command's status (128+n if signal n killed it); ${EXIT_HELD} held and not obtained in time;\n${EXIT_LOST} the lock was lost while the command ran; 64 usage (as flocklease run's, docs/cli.md).`,
    )
    .action(async (command: string[], flags: Record<string, unknown>, self: Command) => {
      const connection = clientOptions(flags, (message) => self.error(message));
      const { runCommand } = await import('./run.js');
      process.exitCode = await runCommand(
        {
          addresses: connection.addresses!,
          key: flags.key as string,
          secret: connection.secret,
          tls: connection.tls,
          waitMs: flags.wait as number,
          permits: flags.permits as number | undefined,
          shared: flags.shared === true,
          publish: flags.publish as string | undefined,
          killAfterMs: flags.killAfter as number | undefined,
          command,
        },
        (line) => process.stderr.write(`ticketing: ${line}\n`),
      );
    });
  addLeaderCommand(program);
  program.parseAsync(argv).catch((error: unknown) => {
    if (error instanceof CommanderError) {
      // --help and --version end here; usage errors were printed already (by outputError).
      process.exit(error.code === 'commander.helpDisplayed' || error.code === 'commander.version' ? 0 : EXIT_USAGE);
    }
    process.stderr.write(`ticketing: ${(error as Error).message ?? String(error)}\n`);
    process.exit(1);
  });
}

main(process.argv);
