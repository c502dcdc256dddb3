/**
 * Connections: accepting them (up to the limit), reading them, closing them, and back-pressure
 * (a connection whose replies back up stops being read, and is cut off if it never reads).
 * Request lines go to requests.ts; replies leave through the outbox (replies.ts).
 */
import type net from 'node:net';
import { performance } from 'node:perf_hooks';
import { channels, publish } from '../events.js';
import { formatError, type ErrorCode } from '../protocol.js';
import { adoptSocket, Connection, noop } from './connection.js';
import type { ServerCore } from './core.js';
import type { RequestHandler } from './requests.js';

/** The receive buffer every connection reads into (one read is handled at a time, to the end). */
const READ_BUFFER_BYTES = 64 * 1024;

export class Connections {
  #nextId = 1;
  /** A write of the outbox is queued for the end of this turn of the loop (#flushQueuedReplies). */
  #flushQueued = false;
  readonly #readBuffer = Buffer.allocUnsafeSlow(READ_BUFFER_BYTES);
  /** Called when the last connection closed (a drain waits for it). */
  onAllClosed: (() => void) | undefined;

  constructor(
    private readonly core: ServerCore,
    private readonly requests: RequestHandler,
  ) {}

  /** `badCertificate`: why the client's certificate was refused (mutual TLS); the connection is
   * answered `E bad_certificate` and closed. */
  accept(accepted: net.Socket, badCertificate?: string): void {
    const { core } = this;
    const config = core.config;
    accepted.on('error', noop); // a reset peer is an ordinary close here; 'close' follows
    if (core.closing) {
      accepted.destroy();
      return;
    }
    if (core.connections.size >= config.maxConnections) {
      // Read and discard whatever it sends so the close is a FIN after our reply, not a reset.
      accepted.end(formatError('capacity', 'too many connections'));
      accepted.resume();
      setTimeout(() => accepted.destroy(), config.writeTimeoutMs).unref();
      publish(channels.serverDisconnect, () => ({ server: core.owner, connection: undefined, reason: 'capacity' }));
      return;
    }
    const id = this.#nextId++;
    // The first read comes on a later turn of the loop, when `conn` is set.
    const socket = adoptSocket(accepted, this.#readBuffer, (chunk) => this.#onData(conn, chunk));
    const conn = new Connection(id, socket, config.maxLineBytes, !this.requests.needsAuth, this.requests.handleLine);
    core.connections.set(id, conn);
    if (!conn.authed) {
      conn.authTimer = setTimeout(() => {
        this.fail(conn, 'auth_failed', 'no H line in time');
        core.outbox.flush();
      }, config.authTimeoutMs).unref();
    }
    if (badCertificate !== undefined) {
      this.fail(conn, 'bad_certificate', badCertificate);
      core.outbox.flush();
    }
    socket.on('drain', () => this.resume(conn));
    socket.on('end', () => this.#onEnd(conn));
    socket.on('close', () => this.#onClose(conn));
    publish(channels.serverConnection, () => ({
      server: core.owner,
      connection: id,
      remoteAddress: socket.remoteAddress,
      remotePort: socket.remotePort,
    }));
  }

  #onData(conn: Connection, chunk: Buffer): void {
    if (conn.closing) return; // discarding after an error reply
    const { core } = this;
    const delivery = core.delivery;
    // One reading of the clocks for the chunk's requests, which arrived together (a reading costs
    // about 50 ns here, three per cycle before). A lease still counts from after its request was
    // sent: the chunk is read after that.
    delivery.chunkNow = core.config.clock();
    const perfNow = (delivery.chunkPerfNow = performance.now());
    let status;
    try {
      status = conn.framer.pushBytes(chunk, conn.onLine);
    } finally {
      delivery.chunkNow = -1;
    }
    if (status === 'too_long') this.fail(conn, 'too_long', `line exceeds ${core.config.maxLineBytes} bytes`);
    else this.#noteRead(conn, chunk, perfNow);
    if (!this.#flushQueued) {
      this.#flushQueued = true;
      setImmediate(this.#flushQueuedReplies);
    }
    core.timers.schedule();
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
    this.core.outbox.flush();
  };

  #onEnd(conn: Connection): void {
    // The peer will read no more (allowHalfOpen is off: our side ends after pending writes), so
    // its queued requests leave their queues now rather than be granted into the void.
    if (!conn.closing) {
      conn.closing = true;
      conn.reason = 'peer-ended';
      this.core.delivery.run({ type: 'disconnect', session: conn.id });
      this.core.outbox.flush();
    }
  }

  #onClose(conn: Connection): void {
    const { core } = this;
    core.connections.delete(conn.id);
    conn.clearTimers();
    conn.closing = true;
    conn.out = undefined;
    core.delivery.run({ type: 'disconnect', session: conn.id });
    core.outbox.flush();
    publish(channels.serverDisconnect, () => ({ server: core.owner, connection: conn.id, reason: conn.reason }));
    if (core.connections.size === 0) this.onAllClosed?.();
  }

  /** Bookkeeping for the idle and line timeouts after input was consumed (`chunk`) or resumed. */
  #noteRead(conn: Connection, chunk: Buffer | undefined, now: number): void {
    if (chunk !== undefined) conn.lastReadAt = now;
    if (conn.framer.bufferedBytes === 0) conn.lineSince = -1;
    // A new unfinished line starts with this chunk if an earlier line ended in it (or after a
    // pause, which was the server's doing: the line gets a fresh window).
    else if (conn.lineSince < 0 || chunk === undefined || chunk.indexOf(10) !== -1) conn.lineSince = now;
  }

  /** Queues `E <code>`, stops processing the connection and closes it once the reply is out. */
  fail(conn: Connection, code: ErrorCode, detail?: string, reason: string = code): void {
    this.closeWith(conn, formatError(code, detail), reason);
  }

  /** Queues `line` (an `E`, or a follower's `M`), stops processing and closes once it is out. */
  closeWith(conn: Connection, line: string, reason: string): void {
    if (conn.closing) return;
    this.core.outbox.send(conn, line);
    this.shut(conn, reason);
  }

  /** Stops processing the connection and closes it once what is queued for it is written. */
  shut(conn: Connection, reason: string): void {
    if (conn.closing) return;
    conn.closing = true;
    this.core.outbox.mark(conn); // so that the flush ends it
    this.core.delivery.run({ type: 'disconnect', session: conn.id });
    clearTimeout(conn.authTimer);
    clearTimeout(conn.stallTimer);
    // Keep reading (and dropping) input: closing with unread bytes would send a reset, which can
    // destroy our error line in the peer's receive buffer before it reads it.
    conn.paused = false;
    conn.socket.resume();
    conn.reason = reason;
    conn.lingerTimer = setTimeout(() => conn.socket.destroy(), this.core.config.writeTimeoutMs).unref();
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
    }, this.core.config.writeTimeoutMs).unref();
    publish(channels.serverBackpressure, () => ({
      server: this.core.owner,
      connection: conn.id,
      paused: true,
      bufferedBytes: conn.outBytes + conn.socket.writableLength,
    }));
  }

  resume(conn: Connection): void {
    conn.resumeScheduled = false;
    if (!conn.paused || conn.closing) return;
    const { core } = this;
    if (conn.socket.writableLength > core.config.highWater) return; // not drained enough yet
    conn.paused = false;
    clearTimeout(conn.stallTimer);
    conn.stallTimer = undefined;
    publish(channels.serverBackpressure, () => ({
      server: core.owner,
      connection: conn.id,
      paused: false,
      bufferedBytes: conn.socket.writableLength,
    }));
    const status = conn.framer.resumeBytes(conn.onLine);
    if (status === 'too_long') this.fail(conn, 'too_long', `line exceeds ${core.config.maxLineBytes} bytes`);
    else this.#noteRead(conn, undefined, performance.now());
    core.outbox.flush();
    core.timers.schedule();
    if (!conn.paused && !conn.closing) conn.socket.resume();
  }
}
