/**
 * The server's log: one JSON object per line on stderr (pino), written by a subscriber to the
 * diagnostics_channel events of events.ts, so the library itself logs nothing. What is logged at
 * `info` and above, and the fields of each line, are listed in docs/ticketing-production.md "Logs".
 *
 * Connection-level errors (bad requests, failed auth, write timeouts, refusals at capacity, failed
 * accepts) are rate-limited: at most `burst` lines per `windowMs`, then one line with how many
 * were left out, so that a port scan cannot flood the log.
 */
import diagnostics from 'node:diagnostics_channel';
import { pino, type DestinationStream, type Logger } from 'pino';
import { channels } from '../events.js';
import type { Effect } from '../state-types.js';

export type { Logger } from 'pino';

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/**
 * A logger writing JSON lines to `destination` (default: stderr, synchronously, so that nothing
 * is lost at `process.exit`): `time` (ISO 8601), `level` (its name), `pid`, `msg`, then the
 * line's own fields.
 */
export function createLogger(level: LogLevel, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      // `msg` and `err.message` as the error says them: the default serializer appends every
      // cause's message to `err.message`, which repeats what a message already summarizes.
      serializers: { err: pino.stdSerializers.errWithCause },
    },
    destination ?? pino.destination({ fd: 2, sync: true }),
  );
}

/**
 * Process warnings (a dependency's deprecation, …) as log lines: Node would print them raw on
 * stderr, where every line is JSON.
 */
export function logProcessWarnings(logger: Logger): void {
  process.removeAllListeners('warning');
  process.on('warning', (warning) => logger.warn({ err: warning }, `process warning: ${warning.message}`));
}

export interface ServerLogOptions {
  readonly logger: Logger;
  /** Only events of this server count. */
  readonly server: object;
  /** Cluster mode: the server's gate (only its events count). */
  readonly node?: object | undefined;
  /** The server's TLS material (server/tls-material.ts): its reloads are logged. */
  readonly tls?: object | undefined;
  /** Connection-level error lines per window, at most. Default 10. */
  readonly burst?: number;
  /** Default 10 000 ms. */
  readonly windowMs?: number;
}

/** Disconnect reasons that are a client's error or the server's refusal (others are ordinary). */
const CONNECTION_ERRORS = new Set([
  'bad_request',
  'too_long',
  'auth_failed',
  'write-timeout',
  'line-timeout',
  'capacity',
  'bad_certificate',
]);

type Message = Record<string, unknown> & { readonly server?: unknown; readonly node?: unknown };

export class ServerLog {
  readonly #logger: Logger;
  readonly #server: object;
  readonly #node: object | undefined;
  readonly #limit: RateLimit;
  /** Access control's refusals have a limit of their own: a flood of them hides no other error. */
  readonly #refusalLimit: RateLimit;
  /** Remote address of each open connection, for its error line. */
  readonly #remotes = new Map<unknown, string>();
  #leader: unknown;
  #role: unknown = 'follower';
  #etcdReachable: boolean | undefined;
  readonly #subscriptions: Array<[diagnostics.Channel, (message: unknown) => void]> = [];

  constructor(options: ServerLogOptions) {
    const logger = (this.#logger = options.logger);
    this.#server = options.server;
    this.#node = options.node;
    this.#limit = new RateLimit(options.burst ?? 10, options.windowMs ?? 10_000, (suppressed, windowMs) =>
      logger.warn({ suppressed, windowMs }, 'connection errors not logged (rate limit)'),
    );
    this.#refusalLimit = new RateLimit(options.burst ?? 10, options.windowMs ?? 10_000, (suppressed, windowMs) =>
      logger.warn({ suppressed, windowMs }, 'access refusals not logged (rate limit)'),
    );
    this.#on(channels.serverRefused, ({ connection, identity, verb, key }) => {
      if (this.#refusalLimit.allow()) logger.warn({ identity, verb, key, connection }, 'refused by access control');
    });
    this.#on(channels.serverListening, ({ host, port }) => logger.info({ host, port }, 'listening'));
    this.#on(channels.serverExpired, ({ key, owner, token }) =>
      logger.info({ key, owner, token: String(token) }, 'lease expired: the holder never released'),
    );
    // One line per committed grant: subscribed only at debug, so that the effects are not even
    // published for a log that would drop them.
    if (logger.isLevelEnabled('debug'))
      this.#on(channels.serverEffect, ({ effect }) => this.#onEffect(effect as Effect));
    this.#on(channels.serverConnection, ({ connection, remoteAddress, remotePort }) =>
      this.#remotes.set(connection, `${String(remoteAddress)}:${String(remotePort)}`),
    );
    this.#on(channels.serverDisconnect, ({ connection, reason }) => {
      const remote = this.#remotes.get(connection);
      this.#remotes.delete(connection);
      if (CONNECTION_ERRORS.has(reason as string) && this.#limit.allow())
        logger.warn({ reason, connection, remote }, 'connection closed on error');
    });
    this.#on(channels.serverTlsError, ({ error, remoteAddress }) => {
      if (this.#limit.allow()) logger.warn({ err: error, remote: remoteAddress }, 'TLS handshake failed');
    });
    if (options.tls !== undefined) this.#onTlsReload(options.tls);
    this.#on(channels.serverAcceptError, ({ error }) => {
      if (this.#limit.allow()) logger.error({ err: error }, 'accept failed');
    });
    this.#on(channels.serverReserve, ({ error }) =>
      logger.warn({ err: error }, 'state file: background write failed (the next grant writes it synchronously)'),
    );
    this.#on(channels.clusterRole, (message) => this.#onRole(message));
    this.#on(channels.clusterLeader, ({ leader }) => {
      if (leader !== undefined && leader !== this.#leader) logger.info({ leader }, 'leader');
      this.#leader = leader;
    });
    this.#on(channels.clusterEtcd, ({ reachable }) => {
      const before = this.#etcdReachable;
      this.#etcdReachable = reachable as boolean;
      if (reachable === false) logger.warn('etcd unreachable: the lease keepalive is not confirmed');
      else if (before === false) logger.info('etcd back');
    });
  }

  /** Stops logging (unsubscribes); reports what the rate limit left out. */
  close(): void {
    for (const [channel, listener] of this.#subscriptions) channel.unsubscribe(listener);
    this.#subscriptions.length = 0;
    this.#limit.close();
    this.#refusalLimit.close();
  }

  #onRole({ role, reason, error, grants }: Message): void {
    const logger = this.#logger;
    const before = this.#role;
    this.#role = role;
    if (reason === 'elected') logger.info('elected: catching up from etcd');
    else if (reason === 'serving') logger.info({ grants }, 'serving as leader');
    else if (role === 'follower' && before !== 'follower') logger.warn({ reason, err: error }, 'stepped down');
    else if (reason === 'lease lost') logger.warn({ err: error }, 'etcd lease lost');
    else if (reason === 'campaign failed' && this.#limit.allow()) logger.warn({ err: error }, 'campaign failed');
  }

  #onEffect(effect: Effect): void {
    if (effect.type !== 'lease-restarted') return;
    const { key, owner, token, expiresAt } = effect;
    const expires = new Date(expiresAt).toISOString();
    this.#logger.debug({ key, owner, token: String(token), expiresAt: expires }, 'lease restarted at commit');
  }

  #onTlsReload(material: object): void {
    const listener = (raw: unknown): void => {
      const { material: reloaded, files, error } = raw as Message;
      if (reloaded !== material) return;
      if (error === undefined) this.#logger.info({ files }, 'TLS reloaded');
      else this.#logger.error({ err: error }, 'TLS reload failed: keeping the previous material');
    };
    channels.tlsReload.subscribe(listener);
    this.#subscriptions.push([channels.tlsReload, listener]);
  }

  /** Subscribes to `channel` for this server's (or node's) messages. */
  #on(channel: diagnostics.Channel, listener: (message: Message) => void): void {
    const mine = (raw: unknown): void => {
      const message = raw as Message;
      if (message.server === this.#server || (message.node !== undefined && message.node === this.#node))
        listener(message);
    };
    channel.subscribe(mine);
    this.#subscriptions.push([channel, mine]);
  }
}

/** At most `burst` per window; what was refused in a window is reported once at its end. */
class RateLimit {
  #used = 0;
  #suppressed = 0;
  #timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly burst: number,
    private readonly windowMs: number,
    private readonly report: (suppressed: number, windowMs: number) => void,
  ) {}

  allow(): boolean {
    this.#timer ??= setTimeout(() => this.#endWindow(), this.windowMs).unref();
    if (this.#used < this.burst) {
      this.#used++;
      return true;
    }
    this.#suppressed++;
    return false;
  }

  close(): void {
    clearTimeout(this.#timer);
    this.#endWindow();
  }

  #endWindow(): void {
    this.#timer = undefined;
    this.#used = 0;
    const suppressed = this.#suppressed;
    this.#suppressed = 0;
    if (suppressed > 0) this.report(suppressed, this.windowMs);
  }
}
