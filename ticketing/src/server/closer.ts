/**
 * Ending a connection: after an error line (or a follower's `M`), or quietly. Its queued requests
 * leave their queues at once; the socket closes once what is queued for it is written.
 */
import { formatError, type ErrorCode } from '../protocol.js';
import type { CommandApplier } from './applier.js';
import type { Connection } from './connection.js';
import type { Outbox } from './replies.js';

export class Closer {
  constructor(
    private readonly outbox: Outbox,
    private readonly applier: CommandApplier,
    /** How long a closing connection may linger for its last replies to be read. */
    private readonly writeTimeoutMs: number,
  ) {}

  /** Queues `E <code>`, stops processing the connection and closes it once the reply is out. */
  fail(conn: Connection, code: ErrorCode, detail?: string, reason: string = code): void {
    this.closeWith(conn, formatError(code, detail), reason);
  }

  /** Queues `line` (an `E`, or a follower's `M`), stops processing and closes once it is out. */
  closeWith(conn: Connection, line: string, reason: string): void {
    if (conn.closing) return;
    this.outbox.send(conn, line);
    this.shut(conn, reason);
  }

  /** Stops processing the connection and closes it once what is queued for it is written. */
  shut(conn: Connection, reason: string): void {
    if (conn.closing) return;
    conn.closing = true;
    this.outbox.mark(conn); // so that the flush ends it
    this.applier.apply({ type: 'disconnect', session: conn.id });
    clearTimeout(conn.authTimer);
    clearTimeout(conn.stallTimer);
    // Keep reading (and dropping) input: closing with unread bytes would send a reset, which can
    // destroy our error line in the peer's receive buffer before it reads it.
    conn.paused = false;
    conn.socket.resume();
    conn.reason = reason;
    conn.lingerTimer = setTimeout(() => conn.socket.destroy(), this.writeTimeoutMs).unref();
  }
}
