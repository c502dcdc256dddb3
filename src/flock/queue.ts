/**
 * The wait queue of one id, kept as the content of its `.lock` file (which the Go original leaves
 * empty and never reads) and changed only under that file's flock. Each queued waiter holds its
 * own `<safeID>.<ticket>.wait` file flocked, so a dead waiter is seen at once and skipped, and a
 * release can hand the lease straight to the front waiter (see Lease.release).
 * Soft state: not fsynced; losing it costs ordering, never safety.
 */

export interface QueuedWaiter {
  /** Arrival order; also names the waiter's `.wait` file. */
  readonly ticket: number;
  /** Who the lease is handed to. */
  readonly owner: string;
  /** The waiter's lease length, for the expiry of a handed-over lease. */
  readonly ttlMs: number;
}

export interface WaitQueue {
  readonly waiters: QueuedWaiter[];
  /** When the lease was first seen free while reserved for the front waiter (0: not yet). */
  freeSince: number;
}

/** Beyond this the queue refuses newcomers (they still wait, unqueued): the file stays small. */
export const MAX_QUEUE_TEXT = 48 * 1024;

const UTF8 = new TextDecoder();

export function parseQueue(content: string | Uint8Array | undefined): WaitQueue {
  if (content === undefined) return { waiters: [], freeSince: 0 };
  try {
    const value = JSON.parse(typeof content === 'string' ? content : UTF8.decode(content)) as {
      waiters?: unknown;
      freeSince?: unknown;
    };
    const waiters = Array.isArray(value.waiters) ? value.waiters.flatMap(toWaiter) : [];
    return {
      waiters,
      freeSince: typeof value.freeSince === 'number' && Number.isFinite(value.freeSince) ? value.freeSince : 0,
    };
  } catch {
    return { waiters: [], freeSince: 0 }; // unreadable soft state: start over (waiters re-enqueue)
  }
}

function toWaiter(value: unknown): QueuedWaiter[] {
  const { t, o, ttl } = (value ?? {}) as { t?: unknown; o?: unknown; ttl?: unknown };
  const valid =
    Number.isSafeInteger(t) &&
    (t as number) >= 0 &&
    typeof o === 'string' &&
    o !== '' &&
    typeof ttl === 'number' &&
    ttl > 0;
  return valid ? [{ ticket: t as number, owner: o, ttlMs: ttl }] : [];
}

/** The file content; '' for an empty queue (the file is then truncated to nothing). */
export function formatQueue(queue: WaitQueue): string {
  if (queue.waiters.length === 0) return '';
  const waiters = queue.waiters.map(({ ticket, owner, ttlMs }) => ({ t: ticket, o: owner, ttl: ttlMs }));
  return JSON.stringify({ waiters, freeSince: queue.freeSince });
}

/** A ticket later than every queued one and unique across restarts of the queue: wall-clock µs. */
export function nextTicket(queue: WaitQueue, nowMs: number): number {
  const last = queue.waiters.reduce((max, w) => Math.max(max, w.ticket), 0);
  return Math.max(last + 1, Math.floor(nowMs * 1000));
}
