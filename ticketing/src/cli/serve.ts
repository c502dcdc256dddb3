/**
 * `ticketing serve`: runs a TicketServer. Prints `listening <host>:<port>` once it listens (stdout
 * has nothing else; the log is JSON lines on stderr); SIGTERM/SIGINT drain and exit 0 (a second
 * signal exits at once); SIGHUP reloads the TLS and secret files. The secret and the etcd password
 * are read from files only, never from argv (argv is visible to every user of the host).
 *
 * `--cluster` makes the server one node of a lock space kept in etcd (cluster/node.ts); only then
 * is etcd3 (and gRPC) loaded, by a dynamic import.
 */
import { BlockList, isIP } from 'node:net';
import { Option, type Command } from 'commander';
import type { ClusterNode } from '../cluster/node.js';
import { CLUSTER_DEFAULTS, MAX_COMMIT_WINDOW, type ClusterNodeOptions } from '../cluster/options.js';
import { HttpEndpoint } from '../observe/http.js';
import { createLogger, LOG_LEVELS, logProcessWarnings, ServerLog, type Logger, type LogLevel } from '../observe/log.js';
import { TicketMetrics } from '../observe/metrics.js';
import { SERVER_DEFAULTS, TicketServer, type TicketServerOptions } from '../server/server.js';
import { TlsMaterial } from '../server/tls-material.js';
import { durationOption, packageVersion } from '#kernel/flags';
import {
  advertiseAddress,
  etcdPrefix,
  etcdUrls,
  etcdUserName,
  integer,
  leaderTtl,
  listenAddress,
  readNamedFile,
  readSecretFile,
} from './flags.js';

/** The etcd flags that only make sense together, checked before any file is read. */
function checkEtcdFlags(flags: Record<string, unknown>, usage: (message: string) => never): void {
  const secure = (flags.etcd as string[])[0]!.startsWith('https:');
  for (const [flag, name] of [
    ['etcdCa', '--etcd-ca'],
    ['etcdCert', '--etcd-cert'],
    ['etcdKey', '--etcd-key'],
  ] as const) {
    if (flags[flag] !== undefined && !secure) usage(`error: ${name} needs https:// URLs in --etcd`);
  }
  if ((flags.etcdCert === undefined) !== (flags.etcdKey === undefined))
    usage('error: --etcd-cert and --etcd-key go together (a client certificate and its key)');
  if (flags.etcdUser !== undefined && flags.etcdPasswordFile === undefined)
    usage('error: --etcd-user needs --etcd-password-file (a password is never taken from argv)');
  if (flags.etcdPasswordFile !== undefined && flags.etcdUser === undefined)
    usage('error: --etcd-password-file needs --etcd-user');
}

/** The etcd TLS material and user, read from their files (an unreadable file: exit 1). */
function readEtcdAccess(flags: Record<string, unknown>): Pick<ClusterNodeOptions, 'etcdTls' | 'etcdUser'> {
  const pem = (flag: 'etcdCa' | 'etcdCert' | 'etcdKey', what: string): string | undefined =>
    flags[flag] === undefined ? undefined : readNamedFile(flags[flag] as string, what, 'utf8');
  const secure = (flags.etcd as string[])[0]!.startsWith('https:');
  const etcdTls = secure
    ? {
        ca: pem('etcdCa', 'etcd CA file'),
        cert: pem('etcdCert', 'etcd certificate file'),
        key: pem('etcdKey', 'etcd key file'),
      }
    : undefined;
  let etcdUser: ClusterNodeOptions['etcdUser'];
  if (flags.etcdUser !== undefined) {
    const file = flags.etcdPasswordFile as string;
    const password = readNamedFile(file, 'etcd password file', 'utf8').replace(/\r?\n$/, '');
    if (password === '') throw new Error(`etcd password file ${file}: empty`);
    etcdUser = { name: flags.etcdUser as string, password };
  }
  return { etcdTls, etcdUser };
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

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');

/** Only this host can reach a server listening here (a name other than localhost may not be). */
function isLoopback(host: string): boolean {
  if (host === 'localhost') return true;
  const family = isIP(host);
  return family !== 0 && LOOPBACK.check(host, family === 4 ? 'ipv4' : 'ipv6');
}

/** SIGHUP: reload the TLS files (the server and the HTTPS endpoint take the new material; ServerLog
 * logs the outcome) and the secret file. A file that fails keeps the old one in force. */
function reloadOnHangup(
  logger: Logger,
  server: TicketServer,
  material: TlsMaterial | undefined,
  endpoint: HttpEndpoint | undefined,
  secretFile: string | undefined,
): void {
  if (material !== undefined && endpoint?.secure === true)
    material.on('reload', () => endpoint.setTls(material.secureContextOptions));
  process.on('SIGHUP', () => {
    material?.reload();
    if (secretFile === undefined) return;
    try {
      server.setSecret(readSecretFile(secretFile));
      logger.info({ file: secretFile }, 'secret reloaded');
    } catch (error) {
      logger.error({ err: error }, 'secret reload failed: keeping the previous secret');
    }
  });
}

function formatListening(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

/** Flags that mean something only with --cluster (commander's attribute names). */
const CLUSTER_ONLY_FLAGS = [
  'etcd',
  'advertise',
  'etcdCa',
  'etcdCert',
  'etcdKey',
  'etcdUser',
  'etcdPasswordFile',
  'prefix',
  'leaderTtl',
  'commitWindow',
] as const;

export function addServeCommand(program: Command): void {
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
      '--max-shared-holders <n>',
      'shared holders per key',
      integer(1, Number.MAX_SAFE_INTEGER),
      SERVER_DEFAULTS.maxSharedHolders,
    )
    .option('--max-permits <n>', 'largest semaphore N', integer(0, 65535), SERVER_DEFAULTS.maxPermits)
    .option(
      '--max-waiters <n>',
      'queued requests in total',
      integer(0, Number.MAX_SAFE_INTEGER),
      SERVER_DEFAULTS.maxWaiters,
    )
    .option('--max-keys <n>', 'registered keys in total', integer(1, Number.MAX_SAFE_INTEGER), SERVER_DEFAULTS.maxKeys)
    .option(
      '--max-observations <n>',
      'keys observed (O) at once, all connections together',
      integer(0, Number.MAX_SAFE_INTEGER),
      SERVER_DEFAULTS.maxObservations,
    )
    .option(
      '--max-observations-per-connection <n>',
      'keys one connection may observe at once',
      integer(0, Number.MAX_SAFE_INTEGER),
      SERVER_DEFAULTS.maxObservationsPerConnection,
    )
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
    .option('--tls-cert <path>', 'serve TLS (1.2 or later) with this PEM certificate (needs --tls-key)')
    .option('--tls-key <path>', 'PEM private key of --tls-cert')
    .option('--tls-ca <path>', 'PEM CA: clients must present a certificate it signed (mutual TLS)')
    .option(
      '--allow-plaintext-secret',
      'allow --secret-file on a non-loopback --host without TLS (the secret crosses the network in clear)',
    )
    .option('--cluster', 'cluster mode: one node of a lock space kept in etcd (needs --etcd and --advertise)')
    .option(
      '--etcd <urls>',
      'cluster mode: etcd endpoints, http://host:port,… or https://host:port,… (TLS; without --etcd-ca the system CAs verify etcd)',
      etcdUrls,
    )
    .option('--etcd-ca <file>', 'cluster mode: CA certificate (PEM) that verifies the etcd servers')
    .option('--etcd-cert <file>', 'cluster mode: client certificate (PEM) for etcd, with --etcd-key')
    .option('--etcd-key <file>', 'cluster mode: private key (PEM) of --etcd-cert')
    .option('--etcd-user <name>', 'cluster mode: etcd user (needs --etcd-password-file)', etcdUserName)
    .option('--etcd-password-file <file>', "cluster mode: file holding --etcd-user's password")
    .option(
      '--advertise <host:port>',
      'cluster mode: the address clients reach this node at (sent in M and L)',
      advertiseAddress,
    )
    .option('--prefix <prefix>', 'cluster mode: etcd key prefix of the lock space', etcdPrefix, CLUSTER_DEFAULTS.prefix)
    .addOption(
      new Option('--leader-ttl <dur>', 'cluster mode: leadership lease, whole seconds')
        .argParser(leaderTtl)
        .default(CLUSTER_DEFAULTS.leaderTtlMs, `${CLUSTER_DEFAULTS.leaderTtlMs / 1000}s`),
    )
    .option(
      '--commit-window <n>',
      'cluster mode: most etcd txns in flight at once',
      integer(1, MAX_COMMIT_WINDOW),
      CLUSTER_DEFAULTS.commitWindow,
    )
    .option(
      '--http <host:port>',
      'serve /healthz, /readyz, /metrics and /v1/locks on this address (HTTPS when the server has TLS)',
      listenAddress,
    )
    .addOption(
      new Option('--log-level <level>', 'JSON log lines on stderr at this level and above')
        .choices(LOG_LEVELS)
        .default('info'),
    )
    .action(async (flags: Record<string, unknown>, command: Command) => {
      const cluster = flags.cluster === true;
      if (cluster) {
        if (flags.etcd === undefined) command.error('error: --cluster needs --etcd <url,url,…>');
        if (flags.advertise === undefined) command.error('error: --cluster needs --advertise <host:port>');
        if (flags.stateFile !== undefined)
          command.error('error: --state-file is for single mode (a cluster keeps its tokens in etcd)');
        checkEtcdFlags(flags, (message) => command.error(message));
      } else {
        // Given on the command line, not merely defaulted (--prefix, --leader-ttl, --commit-window).
        for (const flag of CLUSTER_ONLY_FLAGS) {
          if (command.getOptionValueSource(flag) === 'cli')
            command.error(`error: --${flag.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)} needs --cluster`);
        }
      }
      if ((flags.tlsCert === undefined) !== (flags.tlsKey === undefined))
        command.error('error: --tls-cert and --tls-key go together');
      if (flags.tlsCa !== undefined && flags.tlsCert === undefined)
        command.error('error: --tls-ca needs --tls-cert and --tls-key');
      if (
        flags.secretFile !== undefined &&
        flags.tlsCert === undefined &&
        flags.allowPlaintextSecret !== true &&
        !isLoopback(flags.host as string)
      ) {
        command.error(
          `error: --secret-file on --host ${flags.host as string} without --tls-cert would send the secret over the network in clear text; add --tls-cert/--tls-key, or --allow-plaintext-secret to accept that`,
        );
      }
      // Hangups are handled from the start: the default action of SIGHUP would end the process.
      process.on('SIGHUP', () => {});
      const material =
        flags.tlsCert === undefined
          ? undefined
          : TlsMaterial.load({
              cert: flags.tlsCert as string,
              key: flags.tlsKey as string,
              ca: flags.tlsCa as string | undefined,
            });
      const clock = testClock();
      const secret = flags.secretFile === undefined ? undefined : readSecretFile(flags.secretFile as string);
      const etcdAccess = cluster ? readEtcdAccess(flags) : {};
      const logger = createLogger(flags.logLevel as LogLevel);
      logProcessWarnings(logger);
      // The flags hold file names, never a secret or a password.
      logger.info({ version: packageVersion(), config: flags }, 'starting');
      const options: TicketServerOptions = {
        host: flags.host as string,
        port: flags.port as number,
        leaseMs: flags.lease as number,
        secret,
        stateFile: flags.stateFile as string | undefined,
        maxWaitersPerKey: flags.maxWaitersPerKey as number,
        maxSharedHolders: flags.maxSharedHolders as number,
        maxPermits: flags.maxPermits as number,
        maxWaiters: flags.maxWaiters as number,
        maxKeys: flags.maxKeys as number,
        maxObservations: flags.maxObservations as number,
        maxObservationsPerConnection: flags.maxObservationsPerConnection as number,
        maxConnections: flags.maxConnections as number,
        maxLineBytes: flags.maxLine as number,
        writeTimeoutMs: flags.writeTimeout as number,
        idleTimeoutMs: flags.idleTimeout as number,
        lineTimeoutMs: flags.lineTimeout as number,
        tls: material,
        ...(clock === undefined ? {} : { clock }),
      };
      let node: ClusterNode | undefined;
      if (cluster) {
        const { ClusterNode } = await import('../cluster/node.js');
        node = new ClusterNode({
          etcd: flags.etcd as string[],
          ...etcdAccess,
          advertise: flags.advertise as string,
          prefix: flags.prefix as string,
          leaderTtlMs: flags.leaderTtl as number,
          commitWindow: flags.commitWindow as number,
          leaseMs: options.leaseMs!,
          maxKeys: options.maxKeys!,
          maxWaiters: options.maxWaiters!,
          maxWaitersPerKey: options.maxWaitersPerKey!,
          maxSharedHolders: options.maxSharedHolders,
          maxPermits: options.maxPermits,
        });
      }
      const server = new TicketServer({ ...options, gate: node });
      const serverLog = new ServerLog({ logger, server, node, tls: material });
      const http = flags.http as { host: string; port: number } | undefined;
      const endpoint =
        http === undefined
          ? undefined
          : new HttpEndpoint({
              server,
              node,
              metrics: new TicketMetrics({ server, node }),
              tls: material?.secureContextOptions,
              ...http,
            });
      // Handlers first: whoever reads the listening line may signal at once (a write to a pipe is
      // synchronous, so the reader can run before this process gets past it).
      let stopping = false;
      let exitCode = 0;
      const exit = (code: number): never => {
        serverLog.close();
        logger.info({ code }, 'exit');
        process.exit(code);
      };
      const stop = (reason: string): void => {
        if (stopping) exit(exitCode || 1); // second signal: do not wait
        stopping = true;
        logger.info({ reason }, 'draining');
        server.close().then(
          async () => {
            await endpoint?.close();
            exit(exitCode);
          },
          (error: unknown) => {
            logger.error({ err: error }, 'drain failed');
            exit(1);
          },
        );
      };
      /** The log's `fatal` line; a person at a terminal gets a plain `ticketing:` line too, while a
       * log collector (a pipe, a file) gets JSON lines only. */
      const fatal = (error: unknown, logMessage: string): void => {
        logger.fatal({ err: error }, logMessage);
        if (process.stderr.isTTY) process.stderr.write(`ticketing: ${(error as Error).message ?? String(error)}\n`);
      };
      reloadOnHangup(logger, server, material, endpoint, flags.secretFile as string | undefined);
      server.on('error', (error: unknown) => {
        fatal(error, 'serving is unsafe: closing');
        exitCode = 1;
        stop('error');
      });
      process.on('SIGTERM', stop);
      process.on('SIGINT', stop);
      try {
        const { host, port } = await server.listen();
        if (endpoint !== undefined)
          logger.info({ ...(await endpoint.listen()), tls: endpoint.secure }, 'http listening');
        process.stdout.write(`listening ${formatListening(host, port)}\n`);
      } catch (error) {
        fatal(error, (error as Error).message ?? String(error));
        process.exit(1);
      }
    });
}
