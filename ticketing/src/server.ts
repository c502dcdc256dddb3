/**
 * The network layer of the lock server: TCP connections in, commands to the state machine
 * (state.ts), effects out as reply lines. Everything that touches time or sockets lives here:
 * the clock, the deadline timer that feeds `expire`/`wait-timeout`, the 5 s sweep, backpressure,
 * authentication, limits, and the token state file.
 *
 * Hostile or broken clients hurt only themselves, apart from the shared capacity (docs/ticketing.md
 * "Hostile clients"): a malformed, binary or oversized line gets `E bad_request`/`E too_long` and that
 * connection alone is closed; a connection whose replies back up stops being read (and is cut off
 * if it never reads); a line left unfinished is cut off after the line timeout, and a connection
 * with nothing pending after the idle timeout; a closed connection's queued requests leave their
 * queues.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { EventEmitter } from 'node:events';
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { checkNumber, MAX_TIMER_MS, timerDelay } from '#kernel';
import { channels, publish } from './events.js';
import {
  DEFAULT_MAX_LINE_BYTES,
  LineFramer,
  MIN_MAX_LINE_BYTES,
  ReplyBuffer,
  RequestReader,
  formatAcquired,
  formatBusy,
  formatError,
  formatNotReleased,
  formatReleased,
  formatKept,
  formatGone,
  formatTimedOut,
  isName,
  type ErrorCode,
} from './protocol.js';
import { DEFAULT_LIMITS, TicketState, type Command, type Effect, type KeyView } from './state.js';
import { TokenStore } from './token-store.js';

export interface TicketServerOptions {
  /** Address to listen on. Default `127.0.0.1`. */
  readonly host?: string;
  /** Port; 0 (the default) picks a free one. */
  readonly port?: number;
  /** Lease length of every grant, ms. Default 30 000. */
  readonly leaseMs?: number;
  /** Shared secret: when set, a connection's first line must be `H <secret>`. 1–256 bytes of
   * printable ASCII without spaces. */
  readonly secret?: string | undefined;
  /** Queued requests per key (beyond it: `B`). Default 10 000. */
  readonly maxWaitersPerKey?: number;
  /** Queued requests in total (beyond it: `B`). Default 100 000. */
  readonly maxWaiters?: number;
  /** Registered keys in total (beyond it: `B`). Default 1 000 000. */
  readonly maxKeys?: number;
  /** Open connections (beyond it: `E capacity` and close). Default 10 000. */
  readonly maxConnections?: number;
  /** Longest request line in bytes, terminator included (beyond it: `E too_long`). Default 1024. */
  readonly maxLineBytes?: number;
  /** Token high-water mark file (see token-store.ts): tokens stay unique across restarts even if
   * the clock steps back. Optional. */
  readonly stateFile?: string | undefined;
  /** How often expired keys without waiters are swept, ms. Default 5000. */
  readonly sweepIntervalMs?: number;
  /** Replies buffered for one connection beyond which the server stops reading its requests until
   * it drains. Default 64 KiB (at least 16 KiB). */
  readonly outputHighWaterBytes?: number;
  /** A connection whose replies have not drained for this long is cut off; also how long a closing
   * connection may linger. Default 30 000 ms. */
  readonly writeTimeoutMs?: number;
  /** A connection with nothing pending is closed (FIN, no reply) after this long without a byte
   * from it. Nothing pending: no request queued, and no lease granted on it still running (a
   * holder that keeps its connection open while it works, to release on it, is never cut off;
   * its idle time counts from its lease's end). Default 30 000 ms. */
  readonly idleTimeoutMs?: number;
  /** A request line must be finished (`\n`) within this long of its first byte, or the connection
   * gets `E bad_request` and is closed. Default 10 000 ms. */
  readonly lineTimeoutMs?: number;
  /** With a secret: how long a connection may take to send its `H` line. Default 10 000 ms. */
  readonly authTimeoutMs?: number;
  /** `close()`: how long to wait for connections to finish before destroying them. Default 5000 ms. */
  readonly drainTimeoutMs?: number;
  /** Wall clock, epoch ms with sub-ms precision. Default: `performance.timeOrigin + performance.now()`
   * (wall-clock at start, monotonic after, so leases are not bent by clock steps). */
  readonly clock?: () => number;
  /** Cluster mode (cluster/node.ts): decides whether this node serves, owns the state while it
   * leads, and holds every reply until the state change behind it is committed. */
  readonly gate?: ServerGate | undefined;
}

/**
 * The seam between this server and cluster mode. Without a gate the server owns its state and
 * answers at once (single mode). With one, the gate supplies the state (only while this node leads
 * and has rebuilt the table) and every reply passes through `hold` until the gate's commit.
 */
export interface ServerGate {
  /** Called once by `listen()`, before the first connection. */
  attach(host: GateHost): void;
  /** Before a request is processed: `undefined` to process it here, else the one line (`M …` or
   * `E …`) to answer with before closing the connection. */
  refusal(): string | undefined;
  /** Every effect of every command applied to the state. */
  effect(effect: Effect): void;
  /** A reply for a session; `grant` is set for an `A`. The gate hands it back through
   * `GateHost.deliver` once the batch it belongs to is committed, or never. */
  hold(session: number, line: string, grant: { readonly key: string; readonly token: bigint } | undefined): void;
  /** First step of `close()`: answer no more requests, finish or drop what is pending, step down. */
  close(): Promise<void>;
}

/** What a gate may do to the server. */
export interface GateHost {
  /** The server's clock (epoch ms). */
  now(): number;
  /** Serve from this state from now on, or (undefined) from none: every connection that sent a
   * request is answered `E not_active <detail>` and closed. */
  setState(state: TicketState | undefined, detail?: string): void;
  /** Writes committed replies, in order. A grant whose connection is gone is released. */
  deliver(replies: ReadonlyArray<HeldReply>): void;
  /** Sends an unsolicited line (`L …`) to every open connection. */
  broadcast(line: string): void;
}

export interface HeldReply {
  readonly session: number;
  readonly line: string;
  readonly grant: { readonly key: string; readonly token: bigint } | undefined;
}

export const SERVER_DEFAULTS = {
  host: '127.0.0.1',
  port: 0,
  leaseMs: 30_000,
  maxConnections: 10_000,
  maxLineBytes: DEFAULT_MAX_LINE_BYTES,
  sweepIntervalMs: 5_000,
  outputHighWaterBytes: 64 * 1024,
  writeTimeoutMs: 30_000,
  idleTimeoutMs: 30_000,
  lineTimeoutMs: 10_000,
  authTimeoutMs: 10_000,
  drainTimeoutMs: 5_000,
  ...DEFAULT_LIMITS,
} as const;

export interface ServerAddress {
  readonly host: string;
  readonly port: number;
}

export interface ServerStats {
  readonly connections: number;
  readonly keys: number;
  readonly waiters: number;
  readonly lastToken: bigint;
}

/** Sessions for grants made by the server itself (an undeliverable grant's release). */
const INTERNAL_SESSION = -1;
/** Keys visited per sweep slice, so a sweep of a large table never stalls the loop. */
const SWEEP_SLICE = 10_000;
/** Due commands applied per timer callback before yielding to I/O. */
const DUE_BATCH = 10_000;
const MIN_OUTPUT_HIGH_WATER = 16 * 1024;
/** First size of a connection's reply buffer (grown on demand); one larger than the cap is
 * dropped once written, so a past burst does not stay with an idle connection. */
const REPLY_BUFFER_BYTES = 2048;
const REPLY_BUFFER_KEEP_BYTES = 64 * 1024;
/** The receive buffer every connection reads into (one read is handled at a time, to the end). */
const READ_BUFFER_BYTES = 64 * 1024;

// timeOrigin is a getter that crosses into C++: read it once, not per request.
const TIME_ORIGIN = performance.timeOrigin;
const monotonicWallClock = (): number => TIME_ORIGIN + performance.now();

class Connection {
  readonly framer: LineFramer;
  /** Replies not yet written (coalesced, written once per incoming chunk or timer tick);
   * allocated on the first reply. */
  out: ReplyBuffer | undefined;
  dirty = false;
  authed: boolean;
  /** No line has been read yet (a secretless server accepts `H` only as the first line). */
  fresh = true;
  /** An `E` was queued (or the peer left): no more requests are processed. */
  closing = false;
  /** Reading is paused because replies backed up. */
  paused = false;
  resumeScheduled = false;
  authTimer: NodeJS.Timeout | undefined;
  stallTimer: NodeJS.Timeout | undefined;
  lingerTimer: NodeJS.Timeout | undefined;
  /** performance.now() of the last byte received, and of the first byte of the unfinished line
   * (-1: none), for the idle and line timeouts. */
  lastReadAt = performance.now();
  lineSince = -1;
  /** performance.now() when the last lease granted on this connection runs out. */
  holdsUntil = 0;
  /** Why the connection is closing (for the disconnect event). */
  reason = 'closed';
  readonly onLine: (buf: Buffer, start: number, end: number) => boolean;

  constructor(
    readonly id: number,
    readonly socket: net.Socket,
    maxLineBytes: number,
    authed: boolean,
    handleLine: (conn: Connection, buf: Buffer, start: number, end: number) => boolean,
  ) {
    this.framer = new LineFramer(maxLineBytes);
    this.authed = authed;
    this.onLine = (buf, start, end) => handleLine(this, buf, start, end);
  }

  /** Replies encoded and not yet handed to the socket. */
  get outBytes(): number {
    return this.out === undefined ? 0 : this.out.length;
  }
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
  readonly #limits: { maxKeys: number; maxWaiters: number; maxWaitersPerKey: number };
  readonly #secretDigest: Buffer | undefined;
  readonly #sweepIntervalMs: number;
  readonly #highWater: number;
  readonly #writeTimeoutMs: number;
  readonly #authTimeoutMs: number;
  readonly #idleTimeoutMs: number;
  readonly #lineTimeoutMs: number;
  readonly #drainTimeoutMs: number;
  readonly #clock: () => number;
  readonly #gate: ServerGate | undefined;

  #state: TicketState | undefined;
  #store: TokenStore | undefined;
  #server: net.Server | undefined;
  #address: ServerAddress | undefined;
  readonly #connections = new Map<number, Connection>();
  #nextId = 1;
  #dirty: Connection[] = [];
  /** A write of #dirty is queued for the end of this turn of the loop (#flushQueuedReplies). */
  #flushQueued = false;
  readonly #request = new RequestReader();
  readonly #readBuffer = Buffer.allocUnsafeSlow(READ_BUFFER_BYTES);
  /** While a chunk is handled: the clock and performance.now() read once for all its requests
   * (-1: none, read them per command). */
  #chunkNow = -1;
  #chunkPerfNow = 0;
  readonly #acquireCommand: Mutable<Extract<Command, { type: 'acquire' }>> = {
    type: 'acquire',
    session: 0,
    key: '',
    owner: '',
    waitMs: 0,
  };
  readonly #releaseCommand: Mutable<Extract<Command, { type: 'release' }>> = {
    type: 'release',
    session: 0,
    key: '',
    token: 0n,
  };
  #deadlineTimer: NodeJS.Timeout | undefined;
  #deadlineAt = Infinity;
  #sweepTimer: NodeJS.Timeout | undefined;
  #sweeping = false;
  #topUpTimer: NodeJS.Timeout | undefined;
  #idleTimer: NodeJS.Timeout | undefined;
  #closing: Promise<void> | undefined;
  #onAllClosed: (() => void) | undefined;

  constructor(options: TicketServerOptions = {}) {
    super();
    if (typeof options !== 'object' || options === null) throw new TypeError('options must be an object');
    this.host = optionalString(options.host, 'host') ?? SERVER_DEFAULTS.host;
    this.port = integerIn(options.port ?? SERVER_DEFAULTS.port, 'port', 0, 65535);
    this.leaseMs = checkTimerMs(options.leaseMs ?? SERVER_DEFAULTS.leaseMs, 'leaseMs');
    this.maxConnections = integerIn(
      options.maxConnections ?? SERVER_DEFAULTS.maxConnections,
      'maxConnections',
      1,
      2 ** 31,
    );
    this.maxLineBytes = integerIn(
      options.maxLineBytes ?? SERVER_DEFAULTS.maxLineBytes,
      'maxLineBytes',
      MIN_MAX_LINE_BYTES,
      2 ** 24,
    );
    this.#limits = {
      maxKeys: integerIn(options.maxKeys ?? SERVER_DEFAULTS.maxKeys, 'maxKeys', 1, Number.MAX_SAFE_INTEGER),
      maxWaiters: integerIn(options.maxWaiters ?? SERVER_DEFAULTS.maxWaiters, 'maxWaiters', 0, Number.MAX_SAFE_INTEGER),
      maxWaitersPerKey: integerIn(
        options.maxWaitersPerKey ?? SERVER_DEFAULTS.maxWaitersPerKey,
        'maxWaitersPerKey',
        0,
        Number.MAX_SAFE_INTEGER,
      ),
    };
    const secret = optionalString(options.secret, 'secret');
    if (secret !== undefined && !isName(secret)) {
      throw new RangeError('secret must be 1-256 bytes of printable ASCII without spaces');
    }
    this.#secretDigest = secret === undefined ? undefined : digest(secret);
    this.stateFile = optionalString(options.stateFile, 'stateFile');
    this.#sweepIntervalMs = checkTimerMs(options.sweepIntervalMs ?? SERVER_DEFAULTS.sweepIntervalMs, 'sweepIntervalMs');
    this.#highWater = integerIn(
      options.outputHighWaterBytes ?? SERVER_DEFAULTS.outputHighWaterBytes,
      'outputHighWaterBytes',
      MIN_OUTPUT_HIGH_WATER,
      2 ** 30,
    );
    this.#writeTimeoutMs = checkTimerMs(options.writeTimeoutMs ?? SERVER_DEFAULTS.writeTimeoutMs, 'writeTimeoutMs');
    this.#authTimeoutMs = checkTimerMs(options.authTimeoutMs ?? SERVER_DEFAULTS.authTimeoutMs, 'authTimeoutMs');
    this.#idleTimeoutMs = checkTimerMs(options.idleTimeoutMs ?? SERVER_DEFAULTS.idleTimeoutMs, 'idleTimeoutMs');
    this.#lineTimeoutMs = checkTimerMs(options.lineTimeoutMs ?? SERVER_DEFAULTS.lineTimeoutMs, 'lineTimeoutMs');
    this.#drainTimeoutMs = checkTimerMs(options.drainTimeoutMs ?? SERVER_DEFAULTS.drainTimeoutMs, 'drainTimeoutMs');
    if (options.clock !== undefined && typeof options.clock !== 'function')
      throw new TypeError('clock must be a function');
    this.#clock = options.clock ?? monotonicWallClock;
    const gate = options.gate;
    if (gate !== undefined && (typeof gate !== 'object' || gate === null || typeof gate.refusal !== 'function')) {
      throw new TypeError('gate must be a ServerGate');
    }
    if (gate !== undefined && this.stateFile !== undefined)
      throw new TypeError('stateFile and gate exclude each other');
    this.#gate = gate;
  }

  /** Where the server listens, once `listen()` resolved. */
  get address(): ServerAddress | undefined {
    return this.#address;
  }

  stats(): ServerStats {
    const state = this.#state;
    return {
      connections: this.#connections.size,
      keys: state?.keyCount ?? 0,
      waiters: state?.waiterCount ?? 0,
      lastToken: state?.lastToken ?? 0n,
    };
  }

  /** The key's holder and queue, or `undefined` when it is not registered. */
  inspect(key: string): KeyView | undefined {
    return this.#state?.get(key);
  }

  /** Starts listening. Reads (and reserves ahead in) the state file first, if there is one. */
  async listen(): Promise<ServerAddress> {
    if (this.#server !== undefined || this.#closing !== undefined) throw new Error('listen() may be called once');
    if (this.stateFile !== undefined) this.#store = TokenStore.open(this.stateFile, { clock: this.#clock });
    if (this.#gate === undefined) {
      this.#state = new TicketState({ leaseMs: this.leaseMs, lastToken: this.#store?.floor ?? 0n, ...this.#limits });
    } else {
      this.#gate.attach(this.#gateHost());
    }
    const server = net.createServer(
      // Paused, so that #adopt can take the handle over before the first read.
      { noDelay: true, allowHalfOpen: false, keepAlive: true, keepAliveInitialDelay: 30_000, pauseOnConnect: true },
      (socket) => this.#onConnection(socket),
    );
    this.#server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ host: this.host, port: this.port }, () => {
        server.off('error', reject);
        resolve();
      });
    });
    // After listening, the only errors are failed accepts (EMFILE when the descriptor limit is
    // reached, ECONNABORTED, …): transient, and not the server's failure. Report, keep serving.
    server.on('error', (error) => publish(channels.serverAcceptError, () => ({ server: this, error })));
    const bound = server.address() as net.AddressInfo;
    this.#address = { host: bound.address, port: bound.port };
    // Cluster mode expires eagerly (every grant has a deadline): nothing is left to sweep.
    if (this.#gate === undefined) this.#sweepTimer = setInterval(() => this.#sweep(), this.#sweepIntervalMs).unref();
    if (this.#store !== undefined) this.#topUpTimer = setInterval(() => this.#topUp(), 1_000).unref();
    // One pass over the connections per quarter of the shorter timeout (a connection is cut up to
    // a quarter late, never early), instead of a timer re-armed on every chunk.
    const idleTick = Math.max(10, Math.min(1_000, Math.min(this.#idleTimeoutMs, this.#lineTimeoutMs) / 4));
    this.#idleTimer = setInterval(() => this.#cutIdle(), idleTick).unref();
    publish(channels.serverListening, () => ({ server: this, ...this.#address }));
    return this.#address;
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
    clearInterval(this.#sweepTimer);
    clearInterval(this.#topUpTimer);
    clearInterval(this.#idleTimer);
    clearTimeout(this.#deadlineTimer);
    const server = this.#server;
    if (server === undefined) return;
    // Cluster mode: from here on the gate refuses requests; it commits what is pending (the T
    // answers below included) before it steps down.
    const gateClosed = this.#gate?.close();
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const conn of this.#connections.values()) this.#run({ type: 'disconnect', session: conn.id, notify: true });
    await gateClosed;
    for (const conn of this.#connections.values()) this.#fail(conn, 'not_active', 'shutting down', 'shutdown');
    this.#flush();
    if (this.#connections.size > 0) {
      const allClosed = new Promise<void>((resolve) => (this.#onAllClosed = resolve));
      const timer = setTimeout(() => {
        for (const conn of this.#connections.values()) conn.socket.destroy();
      }, this.#drainTimeoutMs);
      await allClosed;
      clearTimeout(timer);
    }
    await closed;
    await this.#store?.settle();
  }

  // ---------------------------------------------------------------------------------------------
  // Connections

  #onConnection(accepted: net.Socket): void {
    accepted.on('error', noop); // a reset peer is an ordinary close here; 'close' follows
    if (this.#closing !== undefined) {
      accepted.destroy();
      return;
    }
    if (this.#connections.size >= this.maxConnections) {
      // Read and discard whatever it sends so the close is a FIN after our reply, not a reset.
      accepted.end(formatError('capacity', 'too many connections'));
      accepted.resume();
      setTimeout(() => accepted.destroy(), this.#writeTimeoutMs).unref();
      publish(channels.serverDisconnect, () => ({ server: this, connection: undefined, reason: 'capacity' }));
      return;
    }
    const id = this.#nextId++;
    // The first read comes on a later turn of the loop, when `conn` is set.
    const socket = this.#adopt(accepted, (chunk) => this.#onData(conn, chunk));
    const conn = new Connection(id, socket, this.maxLineBytes, this.#secretDigest === undefined, this.#handleLine);
    this.#connections.set(id, conn);
    if (this.#secretDigest !== undefined) {
      conn.authTimer = setTimeout(() => {
        this.#fail(conn, 'auth_failed', 'no H line in time');
        this.#flush();
      }, this.#authTimeoutMs).unref();
    }
    socket.on('drain', () => this.#resume(conn));
    socket.on('end', () => this.#onEnd(conn));
    socket.on('close', () => this.#onClose(conn));
    publish(channels.serverConnection, () => ({
      server: this,
      connection: id,
      remoteAddress: socket.remoteAddress,
      remotePort: socket.remotePort,
    }));
  }

  /**
   * The connection's socket, reading into the shared receive buffer: the accepted socket's handle
   * re-wrapped in a socket with `onread` (as `net.connect` offers; `net.Server` does not), so a
   * read costs no Buffer of its own and no pass through the readable stream, whose share of a
   * one-request read is measurable (docs/ticketing.md "Benchmark"). What is received is handed to
   * `onChunk` during the read: the line framer copies whatever it keeps beyond it. Should the
   * handle not be where this expects it (another Node), the accepted socket is used as it is,
   * with `'data'` events.
   */
  #adopt(accepted: net.Socket, onChunk: (chunk: Buffer) => void): net.Socket {
    const internals = accepted as unknown as { _handle?: { readStart?: unknown } | null };
    const handle = internals._handle;
    if (handle === null || handle === undefined || typeof handle.readStart !== 'function') {
      accepted.on('data', onChunk);
      accepted.resume();
      return accepted;
    }
    const buffer = this.#readBuffer;
    const options = {
      handle,
      allowHalfOpen: false,
      readable: true,
      writable: true,
      onread: {
        buffer,
        callback: (bytes: number): boolean => {
          onChunk(buffer.subarray(0, bytes));
          return true; // a pause is the server's own (#pause)
        },
      },
    };
    internals._handle = null;
    accepted.destroy(); // without its handle: only the net.Server's count of it ends
    const socket = new net.Socket(options);
    socket.on('error', noop);
    return socket;
  }

  #onData(conn: Connection, chunk: Buffer): void {
    if (conn.closing) return; // discarding after an error reply
    // One reading of the clocks for the chunk's requests, which arrived together (a reading costs
    // about 50 ns here, three per cycle before). A lease still counts from after its request was
    // sent: the chunk is read after that.
    this.#chunkNow = this.#clock();
    const perfNow = (this.#chunkPerfNow = performance.now());
    let status;
    try {
      status = conn.framer.pushBytes(chunk, conn.onLine);
    } finally {
      this.#chunkNow = -1;
    }
    if (status === 'too_long') this.#fail(conn, 'too_long', `line exceeds ${this.maxLineBytes} bytes`);
    else this.#noteRead(conn, chunk, perfNow);
    if (!this.#flushQueued) {
      this.#flushQueued = true;
      setImmediate(this.#flushQueuedReplies);
    }
    this.#schedule();
  }

  /**
   * The replies to every connection read in this turn of the loop leave together, after the poll
   * phase (as Redis writes its replies before it sleeps). Writing each connection's replies as
   * soon as its read was handled woke the peer once per connection while the server still had
   * reads to do: that cost about 0.4 µs of kernel time per cycle at 4×16 (docs/ticketing.md
   * "Writing after the poll phase"). Memory stays bounded: a connection whose unsent replies
   * pass the high-water mark is paused per line, as before.
   */
  readonly #flushQueuedReplies = (): void => {
    this.#flushQueued = false;
    this.#flush();
  };

  /** One request line. Returns false to stop reading this connection's buffered lines. */
  readonly #handleLine = (conn: Connection, buf: Buffer, start: number, end: number): boolean => {
    if (conn.closing) return false;
    const request = this.#request.read(buf, start, end);
    const fresh = conn.fresh;
    conn.fresh = false;
    if (request.op === 'error') {
      this.#fail(conn, 'bad_request', request.detail, 'bad_request');
      return false;
    }
    if (!conn.authed) {
      if (request.op !== 'H' || !timingSafeEqual(digest(request.secret), this.#secretDigest!)) {
        this.#fail(conn, 'auth_failed', undefined, 'auth_failed');
        return false;
      }
      conn.authed = true;
      clearTimeout(conn.authTimer);
      conn.authTimer = undefined;
      return true;
    }
    if (this.#gate !== undefined && request.op !== 'H') {
      const refusal = this.#gate.refusal();
      if (refusal !== undefined) {
        this.#closeWith(conn, refusal, 'refused');
        return false;
      }
    }
    switch (request.op) {
      case 'A': {
        // One command object, refilled per request: the state machine keeps none of it.
        const command = this.#acquireCommand;
        command.session = conn.id;
        command.key = request.key;
        command.owner = request.owner;
        command.waitMs = request.waitMs;
        this.#run(command);
        break;
      }
      case 'R': {
        const command = this.#releaseCommand;
        command.session = conn.id;
        command.key = request.key;
        command.token = request.token;
        this.#run(command);
        break;
      }
      case 'K':
        this.#run({ type: 'keep', session: conn.id, key: request.key, token: request.token });
        break;
      case 'H':
        // A secretless server accepts (and ignores) H as the first line, so a client configured
        // with a secret still works; anywhere else H is out of place.
        if (!fresh || this.#secretDigest !== undefined) {
          this.#fail(conn, 'bad_request', 'H must be the first line', 'bad_request');
          return false;
        }
        break;
    }
    if (conn.outBytes + conn.socket.writableLength > this.#highWater) {
      this.#pause(conn);
      return false;
    }
    return true;
  };

  #onEnd(conn: Connection): void {
    // The peer will read no more (allowHalfOpen is off: our side ends after pending writes), so
    // its queued requests leave their queues now rather than be granted into the void.
    if (!conn.closing) {
      conn.closing = true;
      conn.reason = 'peer-ended';
      this.#run({ type: 'disconnect', session: conn.id });
      this.#flush();
    }
  }

  #onClose(conn: Connection): void {
    this.#connections.delete(conn.id);
    clearTimeout(conn.authTimer);
    clearTimeout(conn.stallTimer);
    clearTimeout(conn.lingerTimer);
    conn.closing = true;
    conn.out = undefined;
    this.#run({ type: 'disconnect', session: conn.id });
    this.#flush();
    publish(channels.serverDisconnect, () => ({ server: this, connection: conn.id, reason: conn.reason }));
    if (this.#connections.size === 0) this.#onAllClosed?.();
  }

  /** Bookkeeping for the idle and line timeouts after input was consumed (`chunk`) or resumed. */
  #noteRead(conn: Connection, chunk: Buffer | undefined, now: number): void {
    if (chunk !== undefined) conn.lastReadAt = now;
    if (conn.framer.bufferedBytes === 0) conn.lineSince = -1;
    // A new unfinished line starts with this chunk if an earlier line ended in it (or after a
    // pause, which was the server's doing: the line gets a fresh window).
    else if (conn.lineSince < 0 || chunk === undefined || chunk.indexOf(10) !== -1) conn.lineSince = now;
  }

  /**
   * Closes connections that hold a slot for nothing: a line unfinished for the line timeout
   * (`E bad_request`), or nothing pending for the idle timeout (a quiet FIN: the client reconnects
   * on its next request). Without this, `--max-connections` idle or half-sent sockets would lock
   * every real client out for as long as they stayed open.
   */
  #cutIdle(): void {
    const now = performance.now();
    const state = this.#state!;
    for (const conn of this.#connections.values()) {
      // Unauthenticated ones have the auth timeout; paused ones the write timeout.
      if (conn.closing || conn.paused || !conn.authed) continue;
      if (conn.lineSince >= 0) {
        if (now - conn.lineSince >= this.#lineTimeoutMs) {
          this.#fail(conn, 'bad_request', `no end of line within ${this.#lineTimeoutMs} ms`, 'line-timeout');
        }
      } else if (
        now - Math.max(conn.lastReadAt, conn.holdsUntil) >= this.#idleTimeoutMs &&
        !state.hasWaiters(conn.id)
      ) {
        this.#shut(conn, 'idle');
      }
    }
    this.#flush();
  }

  /** Queues `E <code>`, stops processing the connection and closes it once the reply is out. */
  #fail(conn: Connection, code: ErrorCode, detail?: string, reason: string = code): void {
    this.#closeWith(conn, formatError(code, detail), reason);
  }

  /** Queues `line` (an `E`, or a follower's `M`), stops processing and closes once it is out. */
  #closeWith(conn: Connection, line: string, reason: string): void {
    if (conn.closing) return;
    this.#send(conn, line);
    this.#shut(conn, reason);
  }

  /** Stops processing the connection and closes it once what is queued for it is written. */
  #shut(conn: Connection, reason: string): void {
    if (conn.closing) return;
    conn.closing = true;
    if (!conn.dirty) {
      conn.dirty = true; // so that #flush ends it
      this.#dirty.push(conn);
    }
    this.#run({ type: 'disconnect', session: conn.id });
    clearTimeout(conn.authTimer);
    clearTimeout(conn.stallTimer);
    // Keep reading (and dropping) input: closing with unread bytes would send a reset, which can
    // destroy our error line in the peer's receive buffer before it reads it.
    conn.paused = false;
    conn.socket.resume();
    conn.reason = reason;
    conn.lingerTimer = setTimeout(() => conn.socket.destroy(), this.#writeTimeoutMs).unref();
  }

  // ---------------------------------------------------------------------------------------------
  // Backpressure

  #pause(conn: Connection): void {
    if (conn.paused || conn.closing) return;
    conn.paused = true;
    conn.socket.pause();
    // A client that never reads is cut off: its replies would otherwise sit here forever.
    conn.stallTimer = setTimeout(() => {
      conn.reason = 'write-timeout';
      conn.socket.destroy();
    }, this.#writeTimeoutMs).unref();
    publish(channels.serverBackpressure, () => ({
      server: this,
      connection: conn.id,
      paused: true,
      bufferedBytes: conn.outBytes + conn.socket.writableLength,
    }));
  }

  #resume(conn: Connection): void {
    conn.resumeScheduled = false;
    if (!conn.paused || conn.closing) return;
    if (conn.socket.writableLength > this.#highWater) return; // not drained enough yet
    conn.paused = false;
    clearTimeout(conn.stallTimer);
    conn.stallTimer = undefined;
    publish(channels.serverBackpressure, () => ({
      server: this,
      connection: conn.id,
      paused: false,
      bufferedBytes: conn.socket.writableLength,
    }));
    const status = conn.framer.resumeBytes(conn.onLine);
    if (status === 'too_long') this.#fail(conn, 'too_long', `line exceeds ${this.maxLineBytes} bytes`);
    else this.#noteRead(conn, undefined, performance.now());
    this.#flush();
    this.#schedule();
    if (!conn.paused && !conn.closing) conn.socket.resume();
  }

  // ---------------------------------------------------------------------------------------------
  // Commands and effects

  #run(command: Command): void {
    const state = this.#state;
    if (state === undefined) return; // cluster mode, not leading: nothing to apply to
    const now = this.#chunkNow >= 0 ? this.#chunkNow : this.#clock();
    const effects = state.apply(command, now);
    // Index loop: an undeliverable grant appends the effects of its release.
    for (let i = 0; i < effects.length; i++) {
      const effect = effects[i]!;
      if (channels.serverEffect.hasSubscribers) channels.serverEffect.publish({ server: this, effect });
      this.#gate?.effect(effect);
      this.#deliver(effect, effects, now);
    }
  }

  #deliver(effect: Effect, effects: Effect[], now: number): void {
    switch (effect.type) {
      case 'granted': {
        const conn = this.#connections.get(effect.session);
        if (conn === undefined || conn.closing || !conn.socket.writable) {
          // Nobody can receive this grant (its connection is going away): release it at once so
          // the next waiter gets the key instead of everyone waiting out a lease no one holds.
          publish(channels.serverUndeliverable, () => ({
            server: this,
            connection: effect.session,
            key: effect.key,
            token: effect.token,
          }));
          const release: Command = { type: 'release', session: INTERNAL_SESSION, key: effect.key, token: effect.token };
          for (const more of this.#state!.apply(release, now)) effects.push(more);
          return;
        }
        if (this.#gate === undefined) this.#output(conn).acquired(effect.token, effect.owner, effect.key);
        else
          this.#gate.hold(conn.id, formatAcquired(effect.token, effect.owner, effect.key), {
            key: effect.key,
            token: effect.token,
          });
        const perfNow = this.#chunkNow >= 0 ? this.#chunkPerfNow : performance.now();
        const holdsUntil = perfNow + (effect.expiresAt - now);
        if (holdsUntil > conn.holdsUntil) conn.holdsUntil = holdsUntil;
        return;
      }
      // Cluster mode holds every reply as text until its batch commits; single mode encodes it
      // straight into the connection's buffer (the codec test pins the two to the same bytes).
      case 'timed-out':
        if (this.#gate !== undefined)
          this.#gate.hold(effect.session, formatTimedOut(effect.owner, effect.key), undefined);
        else this.#replyTo(effect.session)?.refused(T, effect.owner, effect.key);
        return;
      case 'busy':
        if (this.#gate !== undefined) this.#gate.hold(effect.session, formatBusy(effect.owner, effect.key), undefined);
        else this.#replyTo(effect.session)?.refused(B, effect.owner, effect.key);
        return;
      case 'released':
        if (this.#gate !== undefined)
          this.#gate.hold(effect.session, formatReleased(effect.token, effect.key), undefined);
        else this.#replyTo(effect.session)?.releaseReply(R, effect.token, effect.key);
        return;
      case 'not-released':
        if (this.#gate !== undefined)
          this.#gate.hold(effect.session, formatNotReleased(effect.token, effect.key), undefined);
        else this.#replyTo(effect.session)?.releaseReply(N, effect.token, effect.key);
        return;
      case 'kept':
        if (this.#gate !== undefined)
          this.#gate.hold(effect.session, formatKept(effect.token, effect.key, effect.leaseMs), undefined);
        else this.#replyTo(effect.session)?.kept(effect.token, effect.key, effect.leaseMs);
        return;
      case 'gone':
        if (this.#gate !== undefined) this.#gate.hold(effect.session, formatGone(effect.token, effect.key), undefined);
        else this.#replyTo(effect.session)?.releaseReply(0x47, effect.token, effect.key);
        return;
      default:
        return; // queued, expired, abandoned, swept: state only
    }
  }

  /** The reply buffer of a session's connection, unless it is gone or closing. */
  #replyTo(session: number): ReplyBuffer | undefined {
    const conn = this.#connections.get(session);
    return conn === undefined || conn.closing ? undefined : this.#output(conn);
  }

  /** Queues a whole reply line (an `E`, `M` or `L`, or a reply the cluster gate held). */
  #send(conn: Connection, line: string): void {
    this.#output(conn).line(line);
  }

  /** The connection's reply buffer, marking it for the next flush. */
  #output(conn: Connection): ReplyBuffer {
    if (!conn.dirty) {
      conn.dirty = true;
      this.#dirty.push(conn);
    }
    return (conn.out ??= new ReplyBuffer(REPLY_BUFFER_BYTES));
  }

  /** Writes every connection's coalesced replies: one write per connection per chunk or tick. */
  #flush(): void {
    if (this.#dirty.length === 0) return;
    const store = this.#store;
    if (store !== undefined && this.#state!.lastToken > store.durable) {
      // Never let a token leave before the state file covers it.
      try {
        store.cover(this.#state!.lastToken);
      } catch (error) {
        this.#fatal(error);
        return;
      }
    }
    const dirty = this.#dirty;
    this.#dirty = [];
    for (const conn of dirty) {
      conn.dirty = false;
      const out = conn.out;
      const socket = conn.socket;
      if (out !== undefined && out.length > 0) {
        if (!socket.destroyed) socket.write(out.buf.subarray(0, out.length));
        // Written through to the kernel (nothing left queued in the stream): the bytes are
        // copied, so the buffer is reused. Otherwise the stream still points into it: next time
        // a new one.
        if (socket.writableLength === 0 && out.buf.length <= REPLY_BUFFER_KEEP_BYTES) out.length = 0;
        else conn.out = undefined;
      }
      if (conn.closing) {
        if (!socket.destroyed && !socket.writableEnded) socket.end();
      } else if (conn.paused && !conn.resumeScheduled && !socket.writableNeedDrain) {
        // The kernel took it all: no 'drain' will come, so continue on the next turn.
        conn.resumeScheduled = true;
        setImmediate(() => this.#resume(conn));
      } else if (!conn.paused && socket.writableLength > this.#highWater) {
        this.#pause(conn);
      }
    }
  }

  /** The state file could not be written: no token may leave. Close everything, then report. */
  #fatal(error: unknown): void {
    this.#dirty = [];
    for (const conn of this.#connections.values()) conn.socket.destroy();
    void this.close();
    this.emit('error', error);
  }

  // ---------------------------------------------------------------------------------------------
  // Time

  /** Arms the one timer for the earliest deadline in the state machine. */
  #schedule(): void {
    const next = this.#state?.nextDeadline();
    if (next === undefined || next >= this.#deadlineAt || this.#closing !== undefined) return;
    clearTimeout(this.#deadlineTimer);
    this.#deadlineAt = next;
    // setTimeout turns a delay past 2^31-1 ms into 1 ms (a spin). A waiter's far deadline is never
    // the earliest (its key's lease expiry, at most 2^31-1 ms away, comes first), so this is
    // defence only; the timer re-arms if it fires early.
    const delay = timerDelay(Math.ceil(next - this.#clock()));
    this.#deadlineTimer = setTimeout(this.#onDeadline, delay).unref();
  }

  readonly #onDeadline = (): void => {
    this.#deadlineTimer = undefined;
    this.#deadlineAt = Infinity;
    const state = this.#state;
    if (state === undefined) return;
    const now = this.#clock();
    for (let n = 0; n < DUE_BATCH; n++) {
      const command = state.nextDue(now);
      if (command === undefined) break;
      this.#run(command);
    }
    this.#flush();
    this.#schedule();
  };

  /** Starts a sweep pass (expired keys without waiters), spread over slices of the table. */
  #sweep(): void {
    if (this.#sweeping || this.#closing !== undefined) return;
    this.#sweeping = true;
    const slice = (): void => {
      if (this.#closing !== undefined) return;
      const effects = this.#state!.apply({ type: 'sweep', limit: SWEEP_SLICE }, this.#clock());
      if (channels.serverEffect.hasSubscribers)
        for (const effect of effects) channels.serverEffect.publish({ server: this, effect });
      const last = effects[effects.length - 1];
      if (last?.type === 'swept' && !last.done) setImmediate(slice);
      else this.#sweeping = false;
    };
    slice();
  }

  // ---------------------------------------------------------------------------------------------
  // Cluster mode

  #gateHost(): GateHost {
    return {
      now: this.#clock,
      setState: (state, detail = 'leadership lost') => {
        const previous = this.#state;
        this.#state = state;
        clearTimeout(this.#deadlineTimer);
        this.#deadlineTimer = undefined;
        this.#deadlineAt = Infinity;
        if (previous !== undefined) {
          // What was queued or held there is lost: close those connections (their clients see
          // Indeterminate) rather than leave them waiting for replies that will never come.
          for (const conn of this.#connections.values()) {
            if (!conn.fresh) this.#fail(conn, 'not_active', detail, 'not_active');
          }
        }
        this.#flush();
        this.#schedule();
      },
      deliver: (replies) => {
        for (const { session, line, grant } of replies) {
          const conn = this.#connections.get(session);
          if (conn !== undefined && !conn.closing && conn.socket.writable) this.#send(conn, line);
          else if (grant !== undefined) {
            publish(channels.serverUndeliverable, () => ({
              server: this,
              connection: session,
              key: grant.key,
              token: grant.token,
            }));
            this.#run({ type: 'release', session: INTERNAL_SESSION, ...grant });
          }
        }
        this.#flush();
        this.#schedule();
      },
      broadcast: (line) => {
        for (const conn of this.#connections.values()) if (!conn.closing) this.#send(conn, line);
        this.#flush();
      },
    };
  }

  #topUp(): void {
    const store = this.#store!;
    store.topUp(this.#state!.lastToken);
    const error = store.takeError();
    if (error !== undefined) publish(channels.serverReserve, () => ({ server: this, error }));
  }
}

function digest(secret: string): Buffer {
  return createHash('sha256').update(secret, 'latin1').digest();
}

function noop(): void {}

type Mutable<T> = { -readonly [K in keyof T]: T[K] };
const T = 0x54;
const B = 0x42;
const R = 0x52;
const N = 0x4e;

function optionalString(value: unknown, what: string): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string') throw new TypeError(`${what} must be a string`);
  if (value.length === 0) throw new RangeError(`${what} must not be empty`);
  return value;
}

function integerIn(value: unknown, what: string, min: number, max: number): number {
  if (typeof value !== 'number') throw new TypeError(`${what} must be a number`);
  if (!Number.isSafeInteger(value) || value < min || value > max)
    throw new RangeError(`${what} must be an integer in ${min}..${max}, got ${value}`);
  return value;
}

/** A delay a timer can hold: the kernel's positive-number rule, at most 2^31-1 ms. */
const checkTimerMs = (value: unknown, what: string): number => checkNumber(value, what, { max: MAX_TIMER_MS });
