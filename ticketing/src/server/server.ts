/**
 * The lock server: TCP connections in, commands to the state machine (state.ts), effects out as
 * reply lines. This file is its public face, its lifecycle (listen, close and drain), and where
 * its parts are put together; each of the other jobs has a file of its own in this folder:
 * options, connection(s), requests (framing and auth), the command applier, replies, closing a
 * connection, the deadline timer, housekeeping, and the cluster gate's host.
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
import type { HeldKey, KeyView, ObservedState } from '../state-types.js';
import { TicketState } from '../state.js';
import { TokenStore } from '../token-store.js';
import { CommandApplier } from './applier.js';
import { Closer } from './closer.js';
import type { OpenConnections } from './connection.js';
import { Connections } from './connections.js';
import { DeadlineTimer } from './deadline-timer.js';
import { createGateHost } from './gate-host.js';
import { Housekeeping } from './housekeeping.js';
import {
  checkSecret,
  resolveOptions,
  type ServerAddress,
  type ServerConfig,
  type ServerStats,
  type TicketServerOptions,
} from './options.js';
import { directReplies, gatedReplies, Outbox } from './replies.js';
import { Observers } from './observers.js';
import { RequestHandler } from './requests.js';

export { SERVER_DEFAULTS, type ServerAddress, type ServerStats, type TicketServerOptions } from './options.js';

/** One held key, for an admin view. */
export interface LockView {
  readonly key: string;
  /** `lock` (modes x and s) or `semaphore` (with `permits`, its N). */
  readonly kind: 'lock' | 'semaphore';
  readonly permits: number | undefined;
  /** Raised by every change of its holders or value (docs/ticketing-election.md). */
  readonly rev: bigint;
  /** The newest live grant's owner, token and lease left (ms, > 0). */
  readonly owner: string;
  readonly token: bigint;
  readonly expiresInMs: number;
  /** Every live grant, oldest first (`shared` for mode s; `slot` for a semaphore's). */
  readonly holders: ReadonlyArray<{
    readonly owner: string;
    readonly token: bigint;
    readonly shared: boolean;
    readonly slot: number | undefined;
    readonly expiresInMs: number;
    /** Its published value, if any. */
    readonly value: string | undefined;
  }>;
  /** Requests queued for the key, and by mode (`x`, `s`, or N). */
  readonly waiters: number;
  readonly waitersByMode: Readonly<Record<string, number>>;
}

/** Would a request sent now be served? `reason` says why not (the refusal's text); `leader` is
 * the leader's advertise address on a follower (which redirects requests there). */
export interface Readiness {
  readonly ready: boolean;
  readonly reason?: string;
  readonly leader?: string;
}

/** How many keys `locks()` lists when not told (and `/v1/locks`, and `ticketing inspect`). */
export const DEFAULT_LOCKS_LIMIT = 1000;

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
  readonly #config: ServerConfig;
  readonly #open: OpenConnections = new Map();
  readonly #outbox: Outbox;
  readonly #applier: CommandApplier;
  readonly #deadlines: DeadlineTimer;
  readonly #closer: Closer;
  readonly #requests: RequestHandler;
  readonly #connections: Connections;
  readonly #housekeeping: Housekeeping;
  readonly #observers: Observers;
  /** The state file (single mode, with `stateFile`), once listening. */
  #store: TokenStore | undefined;
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
    this.#config = config;
    const { gate, clock } = config;
    const open = this.#open;
    // Replies that back up stop a connection's reading, which resumes once they are written: the
    // one loop between the parts, closed through this.#connections.
    const outbox = (this.#outbox = new Outbox(config.highWater, () => this.#tokensCovered(), {
      pause: (conn) => this.#connections.pause(conn),
      resume: (conn) => this.#connections.resume(conn),
    }));
    const sink = gate === undefined ? directReplies(outbox, open) : gatedReplies(gate);
    // A watched key's changes go to the observers, which apply their watches: closed the same way.
    const changed = (key: string, state: ObservedState): void => this.#observers.changed(key, state);
    const applier = (this.#applier = new CommandApplier(this, clock, gate, sink, open, changed));
    const observers = (this.#observers = new Observers(config.observations, applier, outbox, gate, config.highWater));
    const deadlines = (this.#deadlines = new DeadlineTimer(applier, clock, outbox));
    const closer = (this.#closer = new Closer(outbox, applier, config.writeTimeoutMs));
    const requests = (this.#requests = new RequestHandler(config.secret, applier, closer, gate, outbox, observers));
    this.#connections = new Connections(this, config, open, outbox, applier, closer, requests, deadlines, observers);
    this.#housekeeping = new Housekeeping(this, config, applier, open, closer, outbox);
  }

  /** Where the server listens, once `listen()` resolved. */
  get address(): ServerAddress | undefined {
    return this.#address;
  }

  stats(): ServerStats {
    const state = this.#applier.state;
    return {
      connections: this.#open.size,
      keys: state?.keyCount ?? 0,
      waiters: state?.waiterCount ?? 0,
      observations: this.#observers.count,
      lastToken: state?.lastToken ?? 0n,
    };
  }

  /** The key's holder and queue, or `undefined` when it is not registered. */
  inspect(key: string): KeyView | undefined {
    return this.#applier.state?.get(key);
  }

  /**
   * The keys held now whose names start with `prefix`, at most `limit` of them, oldest key first
   * (empty while a cluster node does not lead). Walks the table: meant for an operator's view.
   */
  locks(options: { readonly prefix?: string; readonly limit?: number } = {}): LockView[] {
    const { prefix = '', limit = DEFAULT_LOCKS_LIMIT } = options;
    if (typeof prefix !== 'string') throw new TypeError('prefix must be a string');
    if (!Number.isSafeInteger(limit) || limit < 0) throw new RangeError('limit must be a non-negative integer');
    const state = this.#applier.state;
    if (state === undefined) return [];
    const now = this.#config.clock();
    return state.held(now, prefix, limit).map((held) => lockView(held, now));
  }

  /** The key as `locks()` would list it, or `undefined` when it is not held now (free, or its
   * lease ran out). Reads one key: for a view that follows changes key by key. */
  lock(key: string): LockView | undefined {
    const now = this.#config.clock();
    const held = this.#applier.state?.heldKey(key, now);
    return held === undefined ? undefined : lockView(held, now);
  }

  /** Whether a request sent now would be served (single mode: while listening; cluster mode: on
   * the leader, and on a follower that knows the leader, which redirects to it). */
  readiness(): Readiness {
    if (this.#address === undefined) return { ready: false, reason: 'not listening' };
    if (this.#closing !== undefined) return { ready: false, reason: 'shutting down' };
    const refusal = this.#config.gate?.refusal();
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
    const config = this.#config;
    if (config.stateFile !== undefined) this.#store = TokenStore.open(config.stateFile, { clock: config.clock });
    if (config.gate === undefined) {
      const lastToken = this.#store?.floor ?? 0n;
      this.#applier.state = new TicketState({ leaseMs: config.leaseMs, lastToken, ...config.limits });
    } else {
      config.gate.attach(
        createGateHost({
          clock: config.clock,
          fatal: (error) => this.#fatal(error),
          applier: this.#applier,
          open: this.#open,
          closer: this.#closer,
          outbox: this.#outbox,
          deadlines: this.#deadlines,
          observers: this.#observers,
        }),
      );
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
    this.#housekeeping.start(this.#store);
    publish(channels.serverListening, () => ({ server: this, ...this.#address }));
    return this.#address;
  }

  #createServer(): net.Server {
    const connections = this.#connections;
    const socketOptions = { noDelay: true, allowHalfOpen: false, keepAlive: true, keepAliveInitialDelay: 30_000 };
    const material = this.#config.tls;
    if (material === undefined) {
      // Paused, so that adoptSocket can take the handle over before the first read.
      return net.createServer({ ...socketOptions, pauseOnConnect: true }, (socket) => connections.accept(socket));
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
        handshakeTimeout: this.#config.authTimeoutMs,
      },
      (socket) => {
        const refused = material.mutual && !socket.authorized;
        connections.accept(socket, refused ? certificateRefusal(socket) : undefined);
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
    const open = this.#open;
    this.#connections.close();
    this.#deadlines.stop();
    this.#housekeeping.stop();
    const server = this.#server;
    if (server === undefined) return;
    const config = this.#config;
    // Cluster mode: from here on the gate refuses requests; it commits what is pending (the T
    // answers below included) before it steps down.
    const gateClosed = config.gate?.close();
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const conn of open.values()) this.#applier.apply({ type: 'disconnect', session: conn.id, notify: true });
    await gateClosed;
    for (const conn of open.values()) this.#closer.fail(conn, 'not_active', 'shutting down', 'shutdown');
    this.#outbox.flush();
    if (open.size > 0) {
      const timer = setTimeout(() => {
        for (const conn of open.values()) conn.socket.destroy();
      }, config.drainTimeoutMs);
      await this.#connections.allClosed();
      clearTimeout(timer);
    }
    await closed;
    await this.#store?.settle();
  }

  /** Whether the tokens in the replies about to be written may leave: never before the state file
   * covers them. A state file that cannot be written is fatal. */
  #tokensCovered(): boolean {
    const store = this.#store;
    const lastToken = this.#applier.state?.lastToken;
    if (store === undefined || lastToken === undefined || lastToken <= store.durable) return true;
    try {
      store.cover(lastToken);
      return true;
    } catch (error) {
      this.#fatal(error);
      return false;
    }
  }

  /** The state file could not be written: no token may leave. Close everything, then report. */
  #fatal(error: unknown): void {
    this.#outbox.drop();
    for (const conn of this.#open.values()) conn.socket.destroy();
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

/** A held key as the operator's views show it: lease left instead of an expiry instant. */
function lockView(held: HeldKey, now: number): LockView {
  return {
    key: held.key,
    kind: held.kind,
    permits: held.permits,
    rev: held.rev,
    owner: held.owner,
    token: held.token,
    expiresInMs: held.expiresAt - now,
    holders: held.holders.map(({ owner, token, shared, slot, expiresAt, value }) => {
      return { owner, token, shared, slot, expiresInMs: expiresAt - now, value };
    }),
    waiters: held.waiters,
    waitersByMode: held.waitersByMode,
  };
}
