/** One client connection's bookkeeping, and the socket it reads through. */
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { LineFramer, type ReplyBuffer } from '../protocol.js';

/** One connection's observation of one key (observers.ts). */
export interface Observation {
  /** The greatest rev sent (a held `V` that arrives late is not sent behind a newer one). */
  lastRev: bigint;
  /** The latest `V` not sent because the connection is behind. */
  pending: string | undefined;
}

/** Every open connection, by its id (its session in the state machine). */
export type OpenConnections = Map<number, Connection>;

export class Connection {
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
  /** Its observations by key (observers.ts), once it made one. */
  observing: Map<string, Observation> | undefined;
  /** Its output passed the high-water mark: observations wait for a drain (observers.ts). */
  behind = false;
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

  clearTimers(): void {
    clearTimeout(this.authTimer);
    clearTimeout(this.stallTimer);
    clearTimeout(this.lingerTimer);
  }
}

/**
 * The connection's socket, reading into `buffer`, a receive buffer shared by every connection:
 * the accepted socket's handle re-wrapped in a socket with `onread` (as `net.connect` offers;
 * `net.Server` does not), so a read costs no Buffer of its own and no pass through the readable
 * stream, whose share of a one-request read is measurable (docs/ticketing-bench.md "Levers tried"). What
 * is received is handed to `onChunk` during the read: the line framer copies whatever it keeps
 * beyond it. Should the handle not be where this expects it (another Node, or a TLS socket, whose
 * handle carries ciphertext), the accepted socket is used as it is, with `'data'` events.
 */
export function adoptSocket(accepted: net.Socket, buffer: Buffer, onChunk: (chunk: Buffer) => void): net.Socket {
  const internals = accepted as unknown as { _handle?: { readStart?: unknown } | null; encrypted?: boolean };
  const handle = internals._handle;
  if (
    internals.encrypted === true ||
    handle === null ||
    handle === undefined ||
    typeof handle.readStart !== 'function'
  ) {
    accepted.on('data', onChunk);
    accepted.resume();
    return accepted;
  }
  const options = {
    handle,
    allowHalfOpen: false,
    readable: true,
    writable: true,
    onread: {
      buffer,
      callback: (bytes: number): boolean => {
        onChunk(buffer.subarray(0, bytes));
        return true; // a pause is the server's own (Connections.pause)
      },
    },
  };
  internals._handle = null;
  accepted.destroy(); // without its handle: only the net.Server's count of it ends
  const socket = new net.Socket(options);
  socket.on('error', noop);
  return socket;
}

export function noop(): void {}
