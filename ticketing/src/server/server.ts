/**
 * The lock server: TCP connections in, commands to the state machine (state.ts), effects out as
 * reply lines. This file is its public face and its lifecycle (listen, close and drain); each of
 * the other jobs has a file of its own in this folder: options, connection(s), requests (framing
 * and auth), delivery and replies, timers, and the cluster host.
 *
 * Hostile or broken clients hurt only themselves, apart from the shared capacity (docs/ticketing.md
 * "Hostile clients"): a malformed, binary or oversized line gets `E bad_request`/`E too_long` and that
 * connection alone is closed; a connection whose replies back up stops being read (and is cut off
 * if it never reads); a line left unfinished is cut off after the line timeout, and a connection
 * with nothing pending after the idle timeout; a closed connection's queued requests leave their
 * queues.
 *
 * Observers (an HTTP endpoint, a logger, metrics) are fed by the diagnostics_channel events of
 * events.ts and the read-only queries here (`stats`, `inspect`, `locks`, `readiness`), never by
 * calls woven into the state machine.
 */
import { EventEmitter } from 'node:events';
import net from 'node:net';
import tls from 'node:tls';
import { channels, publish } from '../events.js';
import { TicketState, type KeyView } from '../state.js';
import { TokenStore } from '../token-store.js';
import { createGateHost } from './cluster-host.js';
import { Connections } from './connections.js';
import { ServerCore } from './core.js';
import { Delivery } from './delivery.js';
import {
  checkSecret,
  resolveOptions,
  type ServerAddress,
  type ServerStats,
  type TicketServerOptions,
} from './options.js';
import { directReplies, gatedReplies, Outbox } from './replies.js';
import { RequestHandler } from './requests.js';
import { Timers } from './timers.js';

export { SERVER_DEFAULTS, type ServerAddress, type ServerStats, type TicketServerOptions } from './options.js';

/** One held key, for an admin view. */
export interface LockView {
  readonly key: string;
  readonly owner: string;
  readonly token: bigint;
  /** How long the lease has left, ms (> 0). */
  readonly expiresInMs: number;
  /** Requests queued for the key. */
  readonly waiters: number;
}

/** Would a request sent now be served? `reason` says why not (the refusal's text); `leader` is
 * the leader's advertise address on a follower (which redirects requests there). */
export interface Readiness {
  readonly ready: boolean;
  readonly reason?: string;
  readonly leader?: string;
}

/**
 * The lock server. `await server.listen()` → `{ host, port }`; `await server.close()` drains.
 * Emits `'error'` only for a failure that makes serving unsafe (the state file cannot be written),
 * after closing every connection.
 */
export class TicketServer extends EventEmitter {
  readonly host: string;
  readonly port: number;
  readonly leaseMs: number;
  readonly maxConnections: number;
  readonly maxLineBytes: number;
  readonly stateFile: string | undefined;
  readonly #core: ServerCore;
  readonly #requests: RequestHandler;
  #server: net.Server | undefined;
  #address: ServerAddress | undefined;
  #closing: Promise<void> | undefined;

  constructor(options: TicketServerOptions = {}) {
    super();
    const config = resolveOptions(options);
    this.host = config.host;
    this.port = config.port;
    this.leaseMs = config.leaseMs;
    this.maxConnections = config.maxConnections;
    this.maxLineBytes = config.maxLineBytes;
    this.stateFile = config.stateFile;
    const core = (this.#core = new ServerCore(this, config, (error) => this.#fatal(error)));
    this.#requests = new RequestHandler(core, config.secret);
    core.outbox = new Outbox(core);
    core.delivery = new Delivery(core, config.gate === undefined ? directReplies(core) : gatedReplies(config.gate));
    core.conns = new Connections(core, this.#requests);
    core.timers = new Timers(core);
  }

  /** Where the server listens, once `listen()` resolved. */
  get address(): ServerAddress | undefined {
    return this.#address;
  }

  stats(): ServerStats {
    const state = this.#core.state;
    return {
      connections: this.#core.connections.size,
      keys: state?.keyCount ?? 0,
      waiters: state?.waiterCount ?? 0,
      lastToken: state?.lastToken ?? 0n,
    };
  }

  /** The key's holder and queue, or `undefined` when it is not registered. */
  inspect(key: string): KeyView | undefined {
    return this.#core.state?.get(key);
  }

  /**
   * The keys held now whose names start with `prefix`, at most `limit` of them, oldest key first
   * (empty while a cluster node does not lead). Walks the table: meant for an operator's view.
   */
  locks(options: { readonly prefix?: string; readonly limit?: number } = {}): LockView[] {
    const { prefix = '', limit = 1000 } = options;
    if (typeof prefix !== 'string') throw new TypeError('prefix must be a string');
    if (!Number.isSafeInteger(limit) || limit < 0) throw new RangeError('limit must be a non-negative integer');
    const state = this.#core.state;
    if (state === undefined) return [];
    const now = this.#core.config.clock();
    return state.held(now, prefix, limit).map((held) => ({
      key: held.key,
      owner: held.owner,
      token: held.token,
      expiresInMs: held.expiresAt - now,
      waiters: held.waiters,
    }));
  }

  /** Whether a request sent now would be served (single mode: while listening; cluster mode: on
   * the leader, and on a follower that knows the leader, which redirects to it). */
  readiness(): Readiness {
    if (this.#address === undefined) return { ready: false, reason: 'not listening' };
    if (this.#closing !== undefined) return { ready: false, reason: 'shutting down' };
    const refusal = this.#core.config.gate?.refusal();
    if (refusal === undefined) return { ready: true };
    if (refusal.startsWith('M ')) return { ready: true, leader: refusal.slice(2).trimEnd() };
    return { ready: false, reason: refusal.trimEnd() };
  }

  /** Whether `secret` is the server's `H` secret (true when it has none), compared in constant
   * time: for an endpoint that takes the same secret (`Authorization: Bearer`). */
  authorizes(secret: string | undefined): boolean {
    return this.#requests.authorizes(secret);
  }

  /** Replaces the `H` secret for connections opened from now on (undefined: none). */
  setSecret(secret: string | undefined): void {
    this.#requests.setSecret(checkSecret(secret));
  }

  /** Starts listening. Reads (and reserves ahead in) the state file first, if there is one. */
  async listen(): Promise<ServerAddress> {
    if (this.#server !== undefined || this.#closing !== undefined) throw new Error('listen() may be called once');
    const core = this.#core;
    const config = core.config;
    if (config.stateFile !== undefined) core.store = TokenStore.open(config.stateFile, { clock: config.clock });
    if (config.gate === undefined) {
      core.state = new TicketState({ leaseMs: config.leaseMs, lastToken: core.store?.floor ?? 0n, ...config.limits });
    } else {
      config.gate.attach(createGateHost(core));
    }
    const server = this.#createServer();
    this.#server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ host: config.host, port: config.port }, () => {
        server.off('error', reject);
        resolve();
      });
    });
    // After listening, the only errors are failed accepts (EMFILE when the descriptor limit is
    // reached, ECONNABORTED, …): transient, and not the server's failure. Report, keep serving.
    server.on('error', (error) => publish(channels.serverAcceptError, () => ({ server: this, error })));
    const bound = server.address() as net.AddressInfo;
    this.#address = { host: bound.address, port: bound.port };
    core.timers.start();
    publish(channels.serverListening, () => ({ server: this, ...this.#address }));
    return this.#address;
  }

  #createServer(): net.Server {
    const core = this.#core;
    const socketOptions = { noDelay: true, allowHalfOpen: false, keepAlive: true, keepAliveInitialDelay: 30_000 };
    const material = core.config.tls;
    if (material === undefined) {
      // Paused, so that adoptSocket can take the handle over before the first read.
      return net.createServer({ ...socketOptions, pauseOnConnect: true }, (socket) => core.conns.accept(socket));
    }
    const server = tls.createServer(
      // A handshake gets as long as an H line would.
      // A client certificate that does not verify is not cut off in the handshake: Node would
      // close without a TLS alert, and the client could not tell that from a lost connection. It
      // is answered `E bad_certificate <reason>` instead, before any request is read.
      {
        ...socketOptions,
        ...material.serverOptions(),
        rejectUnauthorized: false,
        handshakeTimeout: core.config.authTimeoutMs,
      },
      (socket) => {
        const refused = material.mutual && !socket.authorized;
        core.conns.accept(socket, refused ? certificateRefusal(socket) : undefined);
      },
    );
    server.on('tlsClientError', (error, socket) =>
      publish(channels.serverTlsError, () => ({ server: this, error, remoteAddress: socket.remoteAddress })),
    );
    const reload = (): void => server.setSecureContext(material.secureContextOptions);
    material.on('reload', reload);
    server.once('close', () => material.off('reload', reload));
    return server;
  }

  /**
   * Drains: stops accepting, answers every queued request `T` (it will not be served), sends
   * `E not_active` to every connection and closes it once its replies are written (destroying
   * what is left after `drainTimeoutMs`). Grants are in memory only: a restarted server starts
   * with no holders (and greater tokens).
   */
  close(): Promise<void> {
    return (this.#closing ??= this.#drain());
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  async #drain(): Promise<void> {
    const core = this.#core;
    core.closing = true;
    core.timers.stop();
    const server = this.#server;
    if (server === undefined) return;
    // Cluster mode: from here on the gate refuses requests; it commits what is pending (the T
    // answers below included) before it steps down.
    const gateClosed = core.config.gate?.close();
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const conn of core.connections.values())
      core.delivery.run({ type: 'disconnect', session: conn.id, notify: true });
    await gateClosed;
    for (const conn of core.connections.values()) core.conns.fail(conn, 'not_active', 'shutting down', 'shutdown');
    core.outbox.flush();
    if (core.connections.size > 0) {
      const allClosed = new Promise<void>((resolve) => (core.conns.onAllClosed = resolve));
      const timer = setTimeout(() => {
        for (const conn of core.connections.values()) conn.socket.destroy();
      }, core.config.drainTimeoutMs);
      await allClosed;
      clearTimeout(timer);
    }
    await closed;
    await core.store?.settle();
  }

  /** The state file could not be written: no token may leave. Close everything, then report. */
  #fatal(error: unknown): void {
    this.#core.outbox.drop();
    for (const conn of this.#core.connections.values()) conn.socket.destroy();
    void this.close();
    this.emit('error', error);
  }
}

/** Why a client's certificate was refused. Node sets `authorizationError` even when the client sent
 * none (UNABLE_TO_GET_ISSUER_CERT): an empty peer certificate is what says so. */
function certificateRefusal(socket: tls.TLSSocket): string {
  if (Object.keys(socket.getPeerCertificate()).length === 0) return 'no client certificate: pass one (cert, key)';
  return String(socket.authorizationError);
}
