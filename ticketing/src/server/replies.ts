/**
 * Replies: one sink for the replies to requests, and the outbox that writes every connection's
 * coalesced replies. Single mode's sink encodes a reply straight into its connection's buffer;
 * cluster mode's holds it as text until the batch behind it commits (the codec test pins the two
 * to the same bytes). The command applier (applier.ts) calls the sink the same way in both modes.
 */
import {
  ReplyBuffer,
  formatAcquired,
  formatBusy,
  formatConflict,
  formatGone,
  formatKept,
  formatNotReleased,
  formatReleased,
  formatTimedOut,
} from '../protocol.js';
import { formatPublished } from '../election-wire.js';
import type { ServerGate } from './cluster-host.js';
import type { Connection, OpenConnections } from './connection.js';

export const T = 0x54;
export const B = 0x42;
export const C = 0x43;
export const R = 0x52;
export const N = 0x4e;
export const G = 0x47;

/** Where the replies to requests go. */
export interface ReplySink {
  /** `A`, to a connection that can receive it (with a semaphore grant's slot, else -1). */
  acquired(conn: Connection, token: bigint, owner: string, key: string, slot: number): void;
  /** `T`, `B` or `C` to a session. */
  refused(session: number, op: typeof T | typeof B | typeof C, owner: string, key: string): void;
  /** `R`, `N` or `G` to a session. */
  releaseReply(session: number, op: typeof R | typeof N | typeof G, token: bigint, key: string): void;
  /** `K` (kept) to a session. */
  kept(session: number, token: bigint, key: string, leaseMs: number): void;
  /** `P` (published) to a session. */
  published(session: number, token: bigint, key: string): void;
}

/** Single mode: encoded at once into the connection's reply buffer (unless it is closing). */
export function directReplies(outbox: Outbox, open: OpenConnections): ReplySink {
  const replyTo = (session: number): ReplyBuffer | undefined => {
    const conn = open.get(session);
    return conn === undefined || conn.closing ? undefined : outbox.output(conn);
  };
  return {
    acquired: (conn, token, owner, key, slot) => outbox.output(conn).acquired(token, owner, key, slot),
    refused: (session, op, owner, key) => replyTo(session)?.refused(op, owner, key),
    releaseReply: (session, op, token, key) => replyTo(session)?.releaseReply(op, token, key),
    kept: (session, token, key, leaseMs) => replyTo(session)?.kept(token, key, leaseMs),
    published: (session, token, key) => replyTo(session)?.line(formatPublished(token, key)),
  };
}

/** Cluster mode: held by the gate until committed, then written by `GateHost.deliver`. */
export function gatedReplies(gate: ServerGate): ReplySink {
  return {
    acquired: (conn, token, owner, key, slot) =>
      gate.hold(conn.id, formatAcquired(token, owner, key, slot >= 0 ? slot : undefined), { key, token }),
    refused: (session, op, owner, key) =>
      gate.hold(session, (op === T ? formatTimedOut : op === B ? formatBusy : formatConflict)(owner, key), undefined),
    releaseReply: (session, op, token, key) =>
      gate.hold(
        session,
        op === R ? formatReleased(token, key) : op === N ? formatNotReleased(token, key) : formatGone(token, key),
        undefined,
      ),
    // A keep writes nothing, but its reply waits for the guarded commit like every other
    // (docs/ticketing-cluster.md "Keeps").
    kept: (session, token, key, leaseMs) => gate.hold(session, formatKept(token, key, leaseMs), undefined),
    published: (session, token, key) => gate.hold(session, formatPublished(token, key), undefined),
  };
}

/** First size of a connection's reply buffer (grown on demand); one larger than the cap is
 * dropped once written, so a past burst does not stay with an idle connection. */
const REPLY_BUFFER_BYTES = 2048;
const REPLY_BUFFER_KEEP_BYTES = 64 * 1024;

/** What the outbox asks of the connections' reading (connections.ts): a connection whose replies
 * back up stops being read, and is read again once they are written. */
export interface ReadControl {
  pause(conn: Connection): void;
  resume(conn: Connection): void;
}

/** Every connection's unwritten replies, written together by `flush`. */
export class Outbox {
  #dirty: Connection[] = [];

  constructor(
    /** Replies buffered for one connection beyond which it stops being read. */
    private readonly highWater: number,
    /** Whether the tokens in the replies may leave (the state file covers them); false: nothing is
     * written (the server failed). */
    private readonly tokensCovered: () => boolean,
    private readonly reading: ReadControl,
  ) {}

  /** The connection's reply buffer, marking it for the next flush. */
  output(conn: Connection): ReplyBuffer {
    this.mark(conn);
    return (conn.out ??= new ReplyBuffer(REPLY_BUFFER_BYTES));
  }

  /** Queues a whole reply line (an `E`, `M` or `L`, or a reply the cluster gate held). */
  send(conn: Connection, line: string): void {
    this.output(conn).line(line);
  }

  /** Marks the connection for the next flush (which ends it, if it is closing). */
  mark(conn: Connection): void {
    if (!conn.dirty) {
      conn.dirty = true;
      this.#dirty.push(conn);
    }
  }

  /** Forgets every unwritten reply (the state file failed: nothing may leave). */
  drop(): void {
    this.#dirty = [];
  }

  /** Writes every connection's coalesced replies: one write per connection per chunk or tick. */
  flush(): void {
    if (this.#dirty.length === 0) return;
    if (!this.tokensCovered()) return;
    const { highWater, reading } = this;
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
        setImmediate(() => reading.resume(conn));
      } else if (!conn.paused && socket.writableLength > highWater) {
        reading.pause(conn);
      }
    }
  }
}
