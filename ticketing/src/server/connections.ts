/**
 * Connections: accepting them (up to the limit), reading them, their end, and back-pressure (a
 * connection whose replies back up stops being read, and is cut off if it never reads). Request
 * lines go to requests.ts; replies leave through the outbox (replies.ts); closer.ts closes.
 */
import type net from 'node:net';
import { performance } from 'node:perf_hooks';
import { channels, publish } from '../events.js';
import { formatError } from '../protocol.js';
import type { CommandApplier } from './applier.js';
import type { Closer } from './closer.js';
import { adoptSocket, Connection, noop, type OpenConnections } from './connection.js';
import type { DeadlineTimer } from './deadline-timer.js';
import type { Observers } from './observers.js';
import type { ServerConfig } from './options.js';
import type { Outbox, ReadControl } from './replies.js';
import type { RequestHandler } from './requests.js';

/** The receive buffer every connection reads into (one read is handled at a time, to the end). */
const READ_BUFFER_BYTES = 64 * 1024;

export type ConnectionsConfig = Pick<
  ServerConfig,
  'clock' | 'maxConnections' | 'maxLineBytes' | 'highWater' | 'writeTimeoutMs' | 'authTimeoutMs'
>;

export class Connections implements ReadControl {
  #nextId = 1;
  /** A write of the outbox is queued for the end of this turn of the loop (#flushQueuedReplies). */
  #flushQueued = false;
  readonly #readBuffer = Buffer.allocUnsafeSlow(READ_BUFFER_BYTES);
  /** close() was called: new connections are refused. */
  #closing = false;
  /** Resolves the drain's wait once the last connection closed. */
  #allClosed: (() => void) | undefined;

  constructor(
    /** The `server` of every diagnostics_channel message. */
    private readonly owner: object,
    private readonly config: ConnectionsConfig,
    private readonly open: OpenConnections,
    private readonly outbox: Outbox,
    private readonly applier: CommandApplier,
    private readonly closer: Closer,
    private readonly requests: Pick<RequestHandler, 'needsAuth' | 'handleLine'>,
    private readonly deadlines: Pick<DeadlineTimer, 'schedule' | 'afterEvent'>,
    /** A closed connection's observations end. */
    private readonly observers: Pick<Observers, 'drop'>,
  ) {}

  /** Refuses connections from now on (the server is closing). */
  close(): void {
    this.#closing = true;
  }

  /** Resolves once every open connection has closed. */
  allClosed(): Promise<void> {
    if (this.open.size === 0) return Promise.resolve();
    return new Promise<void>((resolve) => (this.#allClosed = resolve));
  }

  /** `badCertificate`: why the client's certificate was refused (mutual TLS); the connection is
   * answered `E bad_certificate` and closed. */
  accept(accepted: net.Socket, badCertificate?: string): void {
    const { config, closer, outbox } = this;
    accepted.on('error', noop); // a reset peer is an ordinary close here; 'close' follows
    if (this.#closing) {
      accepted.destroy();
      return;
    }
    if (this.open.size >= config.maxConnections) {
      // Read and discard whatever it sends so the close is a FIN after our reply, not a reset.
      accepted.end(formatError('capacity', 'too many connections'));
      accepted.resume();
      setTimeout(() => accepted.destroy(), config.writeTimeoutMs).unref();
      publish(channels.serverDisconnect, () => ({ server: this.owner, connection: undefined, reason: 'capacity' }));
      return;
    }
    const id = this.#nextId++;
    // The first read comes on a later turn of the loop, when `conn` is set.
    const socket = adoptSocket(accepted, this.#readBuffer, (chunk) => this.#onData(conn, chunk));
    const conn = new Connection(id, socket, config.maxLineBytes, !this.requests.needsAuth, this.#onLine);
    this.open.set(id, conn);
    if (!conn.authed) {
      conn.authTimer = setTimeout(() => {
        closer.fail(conn, 'auth_failed', 'no H line in time');
        outbox.flush();
      }, config.authTimeoutMs).unref();
    }
    if (badCertificate !== undefined) {
      closer.fail(conn, 'bad_certificate', badCertificate);
      outbox.flush();
    }
    socket.on('drain', () => this.resume(conn));
    socket.on('end', () => this.#onEnd(conn));
    socket.on('close', () => this.#onClose(conn));
    publish(channels.serverConnection, () => ({
      server: this.owner,
      connection: id,
      remoteAddress: socket.remoteAddress,
      remotePort: socket.remotePort,
    }));
  }

  /** One request line (requests.ts), then back-pressure: a connection whose replies backed up
   * is not read further until they drain. */
  readonly #onLine = (conn: Connection, buf: Buffer, start: number, end: number): boolean => {
    if (!this.requests.handleLine(conn, buf, start, end)) return false;
    if (conn.outBytes + conn.socket.writableLength > this.config.highWater) {
      this.pause(conn);
      return false;
    }
    return true;
  };

  #onData(conn: Connection, chunk: Buffer): void {
    if (conn.closing) return; // discarding after an error reply
    const { applier, config } = this;
    // One reading of the clocks for the chunk's requests, which arrived together (a reading costs
    // about 50 ns here, three per cycle before). A lease still counts from after its request was
    // sent: the chunk is read after that.
    applier.chunkNow = config.clock();
    const perfNow = (applier.chunkPerfNow = performance.now());
    let status;
    try {
      status = conn.framer.pushBytes(chunk, conn.onLine);
    } finally {
      applier.chunkNow = -1;
    }
    if (status === 'too_long') this.closer.fail(conn, 'too_long', `line exceeds ${config.maxLineBytes} bytes`);
    else this.#noteRead(conn, chunk, perfNow);
    if (!this.#flushQueued) {
      this.#flushQueued = true;
      setImmediate(this.#flushQueuedReplies);
    }
    this.deadlines.schedule();
  }

  /**
   * The replies to every connection read in this turn of the loop leave together, after the poll
   * phase (as Redis writes its replies before it sleeps). Writing each connection's replies as
   * soon as its read was handled woke the peer once per connection while the server still had
   * reads to do: that cost about 0.4 µs of kernel time per cycle at 4×16 (docs/ticketing-bench.md
   * "Levers tried"). Memory stays bounded: a connection whose unsent replies
   * pass the high-water mark is paused per line, as before.
   */
  readonly #flushQueuedReplies = (): void => {
    this.#flushQueued = false;
    this.outbox.flush();
  };

  #onEnd(conn: Connection): void {
    // The peer will read no more (allowHalfOpen is off: our side ends after pending writes), so
    // its queued requests leave their queues now rather than be granted into the void.
    if (!conn.closing) {
      conn.closing = true;
      conn.reason = 'peer-ended';
      this.applier.apply({ type: 'disconnect', session: conn.id });
      this.outbox.flush();
    }
  }

  #onClose(conn: Connection): void {
    this.open.delete(conn.id);
    conn.clearTimers();
    conn.closing = true;
    conn.out = undefined;
    this.applier.apply({ type: 'disconnect', session: conn.id });
    this.observers.drop(conn);
    this.outbox.flush();
    publish(channels.serverDisconnect, () => ({ server: this.owner, connection: conn.id, reason: conn.reason }));
    if (this.open.size === 0) this.#allClosed?.();
  }

  /** Bookkeeping for the idle and line timeouts after input was consumed (`chunk`) or resumed. */
  #noteRead(conn: Connection, chunk: Buffer | undefined, now: number): void {
    if (chunk !== undefined) conn.lastReadAt = now;
    if (conn.framer.bufferedBytes === 0) conn.lineSince = -1;
    // A new unfinished line starts with this chunk if an earlier line ended in it (or after a
    // pause, which was the server's doing: the line gets a fresh window).
    else if (conn.lineSince < 0 || chunk === undefined || chunk.indexOf(10) !== -1) conn.lineSince = now;
  }

  /** Stops reading a connection whose replies backed up. */
  pause(conn: Connection): void {
    if (conn.paused || conn.closing) return;
    conn.paused = true;
    conn.socket.pause();
    // A client that never reads is cut off: its replies would otherwise sit here forever.
    conn.stallTimer = setTimeout(() => {
      conn.reason = 'write-timeout';
      conn.socket.destroy();
    }, this.config.writeTimeoutMs).unref();
    publish(channels.serverBackpressure, () => ({
      server: this.owner,
      connection: conn.id,
      paused: true,
      bufferedBytes: conn.outBytes + conn.socket.writableLength,
    }));
  }

  resume(conn: Connection): void {
    conn.resumeScheduled = false;
    if (!conn.paused || conn.closing) return;
    const { config } = this;
    if (conn.socket.writableLength > config.highWater) return; // not drained enough yet
    conn.paused = false;
    clearTimeout(conn.stallTimer);
    conn.stallTimer = undefined;
    publish(channels.serverBackpressure, () => ({
      server: this.owner,
      connection: conn.id,
      paused: false,
      bufferedBytes: conn.socket.writableLength,
    }));
    const status = conn.framer.resumeBytes(conn.onLine);
    if (status === 'too_long') this.closer.fail(conn, 'too_long', `line exceeds ${config.maxLineBytes} bytes`);
    else this.#noteRead(conn, undefined, performance.now());
    this.deadlines.afterEvent();
    if (!conn.paused && !conn.closing) conn.socket.resume();
  }
}
