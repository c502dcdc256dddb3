#!/usr/bin/env node
/**
 * `ticketing serve`: runs a TicketServer. Prints `listening <host>:<port>` once it listens;
 * SIGTERM/SIGINT drain and exit 0 (a second signal exits at once). The secret is read from
 * `--secret-file` only, never from argv (argv is visible to every user of the host).
 * Exit codes (as `flocklease`'s): 0 ok, 64 usage error, 1 any other failure.
 *
 * `serve --cluster` makes the server one node of a lock space kept in etcd (cluster/node.ts); only
 * then is etcd3 (and gRPC) loaded, by a dynamic import.
 */
import { readFileSync } from 'node:fs';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { EXIT_HELD, EXIT_LOST, parseDuration } from '#kernel';
import { isAddress, isName } from './protocol.js';
import { SERVER_DEFAULTS, TicketServer, type TicketServerOptions } from './server.js';

function integer(min: number, max: number) {
  return (text: string): number => {
    if (!/^\d+$/.test(text) || Number(text) < min || Number(text) > max) {
      throw new InvalidArgumentError(`expected an integer in ${min}..${max}`);
    }
    return Number(text);
  };
}

function duration(text: string): number {
  let ms: number;
  try {
    ms = parseDuration(text);
  } catch (error) {
    throw new InvalidArgumentError((error as Error).message);
  }
  if (!(ms > 0) || ms > 2 ** 31 - 1)
    throw new InvalidArgumentError('expected a positive duration of at most 24 days, e.g. 500ms, 30s');
  return ms;
}

const EXIT_USAGE = 64;

function waitDuration(text: string): number {
  if (/^0(ms|s)?$/.test(text)) return 0;
  return duration(text);
}

function addressList(text: string): string[] {
  const list = text.split(',');
  for (const address of list)
    if (!isAddress(address)) throw new InvalidArgumentError(`expected host:port, got ${JSON.stringify(address)}`);
  return list;
}

function keyName(text: string): string {
  if (!isName(text)) throw new InvalidArgumentError('expected 1-256 bytes of printable ASCII without spaces');
  return text;
}

/** A default as the help shows it, in the unit a person would type (`30s`, not `30000`). */
function durationText(ms: number): string {
  for (const [unit, size] of [
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1_000],
  ] as const) {
    if (ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}

function durationOption(flags: string, description: string, defaultMs: number): Option {
  return new Option(flags, description).argParser(duration).default(defaultMs, durationText(defaultMs));
}

function version(): string {
  try {
    return (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string })
      .version;
  } catch {
    return 'unknown';
  }
}

/** The secret is the file's content, without one trailing newline. */
export function readSecretFile(path: string): string {
  let text: string;
  try {
    text = readFileSync(path, 'latin1');
  } catch (error) {
    // Node's EISDIR (and some other) messages omit the path.
    const code = (error as NodeJS.ErrnoException).code;
    const why = code === 'EISDIR' ? 'is a directory (EISDIR)' : (error as Error).message.replace(/, open '.*'$/, '');
    throw new Error(`secret file ${path}: ${why}`, { cause: error });
  }
  const secret = text.replace(/\r?\n$/, '');
  if (!isName(secret))
    throw new Error(`secret file ${path}: the secret must be 1-256 bytes of printable ASCII without spaces`);
  return secret;
}

/** `http://host:port`, comma-separated. */
function etcdUrls(text: string): string[] {
  const urls = text.split(',');
  for (const url of urls) {
    if (
      !/^http:\/\/(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):\d{1,5}\/?$/.test(url) ||
      Number(url.replace(/\/$/, '').split(':').pop()) > 65535
    ) {
      throw new InvalidArgumentError(`expected http://host:port URLs separated by commas, got ${JSON.stringify(url)}`);
    }
  }
  return urls;
}

function advertiseAddress(text: string): string {
  if (!isAddress(text)) throw new InvalidArgumentError('expected host:port');
  return text;
}

function etcdPrefix(text: string): string {
  if (!/^[\x21-\x7e]{1,128}$/.test(text))
    throw new InvalidArgumentError('expected 1-128 printable ASCII characters without spaces');
  return text;
}

function leaderTtl(text: string): number {
  const ms = duration(text);
  if (ms < 1000 || ms % 1000 !== 0 || ms > 3_600_000) {
    throw new InvalidArgumentError(
      'expected a whole number of seconds from 1s to 1h (etcd leases count whole seconds)',
    );
  }
  return ms;
}

/**
 * Test-only: `TICKETING_TEST_CLOCK_OFFSET_MS` shifts this process's wall clock (the clock that
 * stamps grants and tokens) by that many ms, to test nodes whose clocks disagree. Read here only.
 */
function testClock(): (() => number) | undefined {
  const text = process.env.TICKETING_TEST_CLOCK_OFFSET_MS;
  if (text === undefined || text === '') return undefined;
  const offset = Number(text);
  if (!Number.isSafeInteger(offset))
    throw new Error(`TICKETING_TEST_CLOCK_OFFSET_MS must be an integer, got ${JSON.stringify(text)}`);
  return () => performance.timeOrigin + performance.now() + offset;
}

function formatListening(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

export function main(argv: readonly string[]): void {
  const program = new Command('ticketing')
    .description('Ticketing: a TCP lock server with leases and fencing tokens')
    .version(version(), '-V, --version', 'print the version')
    .enablePositionalOptions()
    .exitOverride()
    .showHelpAfterError('(add --help for usage)')
    .configureOutput({ outputError: (text, write) => write(`ticketing: ${text.replace(/^error: /, '')}`) })
    .addHelpText(
      'after',
      '\nDurations: 500ms, 30s, 5m, 2h.\nExit codes: 0 success, 64 usage error (bad flags), 1 any other failure.',
    );
  program
    .command('serve')
    .description('run the lock server (single mode, or one node of a cluster with --cluster)')
    .option('--host <host>', 'address to listen on', SERVER_DEFAULTS.host)
    .option('--port <port>', 'port to listen on (0 = pick a free one)', integer(0, 65535), 0)
    .addOption(durationOption('--lease <dur>', 'lease length of every grant, e.g. 500ms, 30s', SERVER_DEFAULTS.leaseMs))
    .option('--secret-file <path>', 'file holding the shared secret (clients must send H <secret> first)')
    .option(
      '--state-file <path>',
      'token high-water mark file: tokens stay unique across restarts even if the clock steps back',
    )
    .option(
      '--max-waiters-per-key <n>',
      'queued requests per key',
      integer(0, Number.MAX_SAFE_INTEGER),
      SERVER_DEFAULTS.maxWaitersPerKey,
    )
    .option(
      '--max-waiters <n>',
      'queued requests in total',
      integer(0, Number.MAX_SAFE_INTEGER),
      SERVER_DEFAULTS.maxWaiters,
    )
    .option('--max-keys <n>', 'registered keys in total', integer(1, Number.MAX_SAFE_INTEGER), SERVER_DEFAULTS.maxKeys)
    .option('--max-connections <n>', 'open connections', integer(1, 2 ** 31), SERVER_DEFAULTS.maxConnections)
    .option(
      '--max-line <bytes>',
      'longest request line, terminator included',
      integer(64, 2 ** 24),
      SERVER_DEFAULTS.maxLineBytes,
    )
    .addOption(
      durationOption(
        '--write-timeout <dur>',
        'cut off a connection whose replies have not drained for this long',
        SERVER_DEFAULTS.writeTimeoutMs,
      ),
    )
    .addOption(
      durationOption(
        '--idle-timeout <dur>',
        'close a connection with nothing pending (no queued request, no running lease granted on it) after this long without a byte from it',
        SERVER_DEFAULTS.idleTimeoutMs,
      ),
    )
    .addOption(
      durationOption(
        '--line-timeout <dur>',
        'close a connection that leaves a request line unfinished for this long',
        SERVER_DEFAULTS.lineTimeoutMs,
      ),
    )
    .option('--cluster', 'cluster mode: one node of a lock space kept in etcd (needs --etcd and --advertise)')
    .option('--etcd <urls>', 'cluster mode: etcd endpoints, http://host:port,http://host:port,…', etcdUrls)
    .option(
      '--advertise <host:port>',
      'cluster mode: the address clients reach this node at (sent in M and L)',
      advertiseAddress,
    )
    .option('--prefix <prefix>', 'cluster mode: etcd key prefix of the lock space', etcdPrefix, '/ticketing/')
    .addOption(
      new Option('--leader-ttl <dur>', 'cluster mode: leadership lease, whole seconds')
        .argParser(leaderTtl)
        .default(2_000, '2s'),
    )
    .action(async (flags: Record<string, unknown>, command: Command) => {
      const cluster = flags.cluster === true;
      if (cluster) {
        if (flags.etcd === undefined) command.error('error: --cluster needs --etcd <url,url,…>');
        if (flags.advertise === undefined) command.error('error: --cluster needs --advertise <host:port>');
        if (flags.stateFile !== undefined)
          command.error('error: --state-file is for single mode (a cluster keeps its tokens in etcd)');
      } else {
        for (const flag of ['etcd', 'advertise'] as const) {
          if (flags[flag] !== undefined) command.error(`error: --${flag} needs --cluster`);
        }
        for (const flag of ['prefix', 'leaderTtl'] as const) {
          if (command.getOptionValueSource(flag) === 'cli') {
            command.error(`error: --${flag === 'leaderTtl' ? 'leader-ttl' : flag} needs --cluster`);
          }
        }
      }
      const clock = testClock();
      const options: TicketServerOptions = {
        host: flags.host as string,
        port: flags.port as number,
        leaseMs: flags.lease as number,
        secret: flags.secretFile === undefined ? undefined : readSecretFile(flags.secretFile as string),
        stateFile: flags.stateFile as string | undefined,
        maxWaitersPerKey: flags.maxWaitersPerKey as number,
        maxWaiters: flags.maxWaiters as number,
        maxKeys: flags.maxKeys as number,
        maxConnections: flags.maxConnections as number,
        maxLineBytes: flags.maxLine as number,
        writeTimeoutMs: flags.writeTimeout as number,
        idleTimeoutMs: flags.idleTimeout as number,
        lineTimeoutMs: flags.lineTimeout as number,
        ...(clock === undefined ? {} : { clock }),
      };
      let gate: TicketServerOptions['gate'];
      if (cluster) {
        const { ClusterNode } = await import('./cluster/node.js');
        gate = new ClusterNode({
          etcd: flags.etcd as string[],
          advertise: flags.advertise as string,
          prefix: flags.prefix as string,
          leaderTtlMs: flags.leaderTtl as number,
          leaseMs: options.leaseMs!,
          maxKeys: options.maxKeys!,
          maxWaiters: options.maxWaiters!,
          maxWaitersPerKey: options.maxWaitersPerKey!,
        });
      }
      const server = new TicketServer({ ...options, gate });
      server.on('error', (error: unknown) => {
        process.stderr.write(`ticketing: ${(error as Error).message ?? String(error)}\n`);
        process.exitCode = 1;
      });
      // Handlers first: whoever reads the listening line may signal at once (a write to a pipe is
      // synchronous, so the reader can run before this process gets past it).
      let stopping = false;
      const stop = (): void => {
        if (stopping) process.exit(process.exitCode ?? 1); // second signal: do not wait
        stopping = true;
        server.close().then(
          () => process.exit(process.exitCode ?? 0),
          (error: unknown) => {
            process.stderr.write(`ticketing: ${String(error)}\n`);
            process.exit(1);
          },
        );
      };
      process.on('SIGTERM', stop);
      process.on('SIGINT', stop);
      const { host, port } = await server.listen();
      process.stdout.write(`listening ${formatListening(host, port)}\n`);
    });
  program
    .command('run')
    .description(
      'run a command while holding a key: keep it alive, release when the command exits, exit with its status; on loss SIGTERM (then SIGKILL) its process group before the lease can pass on',
    )
    .requiredOption('--addresses <host:port,…>', "the server, or a cluster's nodes", addressList)
    .requiredOption('--key <key>', 'the key to hold', keyName)
    .addOption(
      new Option('--wait <dur>', 'wait this long for a held key (0: do not wait)')
        .argParser(waitDuration)
        .default(0, '0s'),
    )
    .option('--secret-file <path>', 'file holding the shared secret')
    .addOption(
      new Option(
        '--kill-after <dur>',
        'after a loss, SIGKILL this long after SIGTERM (default: a tenth of the lease)',
      ).argParser(duration),
    )
    .argument('<command...>', 'the command and its arguments (after --)')
    .passThroughOptions()
    .addHelpText(
      'after',
      `\nThe command gets TICKETING_KEY and TICKETING_TOKEN (the fencing token) in its environment.\nExit codes: the command's status (128+n if signal n killed it); ${EXIT_HELD} held and not obtained in time;\n${EXIT_LOST} the lock was lost while the command ran; 64 usage (as flocklease run's, docs/cli.md).`,
    )
    .action(async (command: string[], flags: Record<string, unknown>) => {
      const { runCommand } = await import('./run.js');
      process.exitCode = await runCommand(
        {
          addresses: flags.addresses as string[],
          key: flags.key as string,
          secret: flags.secretFile === undefined ? undefined : readSecretFile(flags.secretFile as string),
          waitMs: flags.wait as number,
          killAfterMs: flags.killAfter as number | undefined,
          command,
        },
        (line) => process.stderr.write(`ticketing: ${line}\n`),
      );
    });
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
