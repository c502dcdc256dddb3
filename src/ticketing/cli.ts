#!/usr/bin/env node
/**
 * `ticketing serve`: runs a TicketServer. Prints `listening <host>:<port>` once it listens;
 * SIGTERM/SIGINT drain and exit 0 (a second signal exits at once). The secret is read from
 * `--secret-file` only, never from argv (argv is visible to every user of the host).
 */
import { readFileSync } from 'node:fs';
import { Command, InvalidArgumentError } from 'commander';
import { parseDuration } from '../duration.js';
import { isName } from './protocol.js';
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
  if (!(ms > 0) || ms > 2 ** 31 - 1) throw new InvalidArgumentError('expected a positive duration of at most 24 days, e.g. 500ms, 30s');
  return ms;
}

/** The secret is the file's content, without one trailing newline. */
export function readSecretFile(path: string): string {
  const secret = readFileSync(path, 'latin1').replace(/\r?\n$/, '');
  if (!isName(secret)) throw new Error(`secret file ${path}: the secret must be 1-256 bytes of printable ASCII without spaces`);
  return secret;
}

function formatListening(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

export function main(argv: readonly string[]): void {
  const program = new Command('ticketing').description('Ticketing: a TCP lock server with leases and fencing tokens');
  program
    .command('serve')
    .description('run the lock server (single mode)')
    .option('--host <host>', 'address to listen on', SERVER_DEFAULTS.host)
    .option('--port <port>', 'port to listen on (0 = pick a free one)', integer(0, 65535), 0)
    .option('--lease <dur>', 'lease length of every grant, e.g. 500ms, 30s', duration, SERVER_DEFAULTS.leaseMs)
    .option('--secret-file <path>', 'file holding the shared secret (clients must send H <secret> first)')
    .option('--state-file <path>', 'token high-water mark file: tokens stay unique across restarts even if the clock steps back')
    .option('--max-waiters-per-key <n>', 'queued requests per key', integer(0, Number.MAX_SAFE_INTEGER), SERVER_DEFAULTS.maxWaitersPerKey)
    .option('--max-waiters <n>', 'queued requests in total', integer(0, Number.MAX_SAFE_INTEGER), SERVER_DEFAULTS.maxWaiters)
    .option('--max-keys <n>', 'registered keys in total', integer(1, Number.MAX_SAFE_INTEGER), SERVER_DEFAULTS.maxKeys)
    .option('--max-connections <n>', 'open connections', integer(1, 2 ** 31), SERVER_DEFAULTS.maxConnections)
    .option('--max-line <bytes>', 'longest request line, terminator included', integer(64, 2 ** 24), SERVER_DEFAULTS.maxLineBytes)
    .option('--write-timeout <dur>', 'cut off a connection whose replies have not drained for this long', duration, SERVER_DEFAULTS.writeTimeoutMs)
    .option('--idle-timeout <dur>', 'close a connection with nothing pending (no queued request, no running lease granted on it) after this long without a byte from it', duration, SERVER_DEFAULTS.idleTimeoutMs)
    .option('--line-timeout <dur>', 'close a connection that leaves a request line unfinished for this long', duration, SERVER_DEFAULTS.lineTimeoutMs)
    .action(async (flags: Record<string, unknown>) => {
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
      };
      const server = new TicketServer(options);
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
  program.parseAsync(argv).catch((error: unknown) => {
    process.stderr.write(`ticketing: ${(error as Error).message ?? String(error)}\n`);
    process.exit(1);
  });
}

main(process.argv);
