/**
 * The cross-process wait line of a lease directory: who a free lease is reserved for, where a
 * refused waiting acquire queues, and who a release hands the lease to. The queue is the content
 * of the id's `.lock` file (see queue.ts), so every method runs under that transition lock.
 */
import { LeaseHeldError } from '../port/errors.js';
import { nextToken } from '../kernel/token.js';
import { MAX_EXPIRY_MS } from '../port/validate.js';
import type { LeaseIO, WatchMode } from './io.js';
import type { TransitionContext } from './transition.js';
import type { DirPaths } from './layout.js';
import { holderOf, type LeaseRecord } from './record.js';
import {
  formatQueue,
  frontWaiter,
  MAX_QUEUE_TEXT,
  maxTicket,
  nextTicket,
  parseQueue,
  queueText,
  scanOwnQueue,
  withoutFront,
  withWaiter,
  type QueuedWaiter,
  type QueueRead,
  type Place,
  type QueueShape,
  type WaitQueue,
} from './queue.js';

/** A refused try, and what to wait for before the next one. */
export interface Refused {
  /** The error, made only if it is thrown: a waiting acquire is refused every round, and an
   * error's stack capture each time would cost more than the round's other work. */
  readonly refusal: () => LeaseHeldError;
  /** A lock file whose release is worth waking for (the holder's .live, or a waiter's .wait). */
  readonly watch: string | undefined;
  /** How to watch it: 'writers' for a waiter's .wait, which only this port locks, always through a
   * descriptor open for writing (see WatchMode); every close of a .live (Go holds its read-only). */
  readonly watchMode?: WatchMode | undefined;
  /** Clock time (epoch ms) at which to look again regardless (the holder's expiry, a waiter's grace). */
  readonly until: number | undefined;
}

/** The front waiter a release hands the lease to, with its new token. It stays in front until
 * the caller says it was handed the lease (or had gone): see WaitLine.handedOff. */
export interface HandOff {
  readonly waiter: QueuedWaiter;
  readonly next: bigint;
}

/** How long a free lease stays reserved for a queued waiter that is alive but does not come for
 * it (stopped, or its event loop blocked) before the next one may go first. */
const WAITER_GRACE_MAX_MS = 1_000;
/** Beyond this many queued tickets, dead ones are pruned anywhere in the queue, not just in front. */
const QUEUE_PRUNE_AT = 16;

export interface WaitLineOptions {
  readonly io: LeaseIO;
  /** The lease directory's paths. */
  readonly paths: DirPaths;
  /** The lease length a queued waiter asks for. */
  readonly ttlMs: number;
  /** Closes a left place's `.wait` fd, or keeps it to retry (the Lease's pending cleanup). */
  readonly closeOrDefer: (safe: string, fd: number) => void;
}

export class WaitLine {
  readonly #io: LeaseIO;
  readonly #paths: DirPaths;
  readonly #ttlMs: number;
  readonly #graceMs: number;
  readonly #closeOrDefer: (safe: string, fd: number) => void;

  constructor(options: WaitLineOptions) {
    this.#io = options.io;
    this.#paths = options.paths;
    this.#ttlMs = options.ttlMs;
    this.#graceMs = Math.min(options.ttlMs, WAITER_GRACE_MAX_MS);
    this.#closeOrDefer = options.closeOrDefer;
  }

  /** The `.wait` file of a ticket. */
  waitPath(safe: string, ticket: number): string {
    return this.#paths.wait(safe, ticket);
  }

  /**
   * A takeable lease: `undefined` if this transition may take it (queued waiters go first, in
   * arrival order; the caller's own ticket leaves the queue, and its flocked `.wait` file stays
   * with its place for the takeover to adopt), else the refusal naming the waiter it is reserved
   * for. `record` is what the refusal names as the holder (expired, released), as in any refusal.
   */
  claim(tx: TransitionContext, record: LeaseRecord | undefined): Refused | undefined {
    const read = this.#read(tx);
    if (count(read) > 0) {
      const queue = entries(read);
      const ahead = this.#waiterAhead(tx, queue);
      if (ahead !== undefined) {
        const refusal = (): LeaseHeldError =>
          new LeaseHeldError(
            `lease ${JSON.stringify(tx.sessionId)} is free but reserved for a queued waiter (ticket ${ahead})`,
            tx.sessionId,
            record && holderOf(record),
          );
        const watch = this.waitPath(tx.safe, ahead);
        return this.refuse(tx, refusal, watch, queue.freeSince + this.#graceMs, 'writers');
      }
      const mine = queue.waiters.findIndex((w) => w.ticket === tx.place?.ticket);
      if (mine >= 0) queue.waiters.splice(mine, 1);
      queue.freeSince = 0;
      this.#flush(tx, read);
    }
    return undefined;
  }

  /**
   * Whether a waiting acquire's first try finds others in line. It then joins the line behind them
   * whether the holder is alive or not (a crashed lease is reserved for the front waiter, whom the
   * holder's death wakes), so it need not ask the kernel: see Lease's state rule.
   */
  othersInLine(tx: TransitionContext): boolean {
    return tx.place !== undefined && tx.place.ticket === undefined && count(this.#read(tx)) > 0;
  }

  /**
   * A waiting acquire's first try that finds others in line: its place at the back, and the
   * refusal. It joins them whatever the record says (see othersInLine), so the caller need not read
   * the record. `undefined` when nobody is in line or no place was taken behind anyone (a full queue,
   * a ticket somebody holds, or only dead waiters ahead): the caller then decides as usual.
   */
  joinBehindOthers(tx: TransitionContext, refusal: () => LeaseHeldError): Refused | undefined {
    if (!this.othersInLine(tx)) return undefined;
    const read = this.#read(tx);
    const ahead = this.#join(tx, read, tx.place!);
    if (ahead === undefined) return undefined;
    this.#flush(tx, read);
    return this.#behind(tx, ahead, refusal);
  }

  /** A refusal; a waiting acquire also takes (or keeps) its place in the queue here. */
  refuse(
    tx: TransitionContext,
    refusal: () => LeaseHeldError,
    watch: string,
    until: number,
    watchMode?: WatchMode,
  ): Refused {
    const { place, safe } = tx;
    // A waiting acquire reads the queue; any other refusal writes back what this transition changed.
    const read = place !== undefined ? this.#read(tx) : tx.queue;
    let ahead: number | undefined; // the ticket of the waiter just ahead of this one in the line
    if (place !== undefined && read !== undefined) {
      const waiters = place.ticket === undefined ? undefined : entries(read).waiters;
      const at = waiters?.findIndex((w) => w.ticket === place.ticket) ?? -1;
      if (at < 0) {
        // First refusal, or skipped while away: (re)join at the back.
        this.leave(safe, place);
        ahead = this.#join(tx, read, place);
      } else ahead = at > 0 ? waiters![at - 1]!.ticket : undefined;
    }
    if (read !== undefined) this.#flush(tx, read);
    if (ahead !== undefined) return this.#behind(tx, ahead, refusal);
    return { refusal, watch, watchMode, until };
  }

  /**
   * Behind someone: watch the .wait file of the waiter just ahead. It fires when that waiter leaves
   * the line (gave up, or died) — or, once it was handed the lease and its .wait file became the
   * .live, when it releases: exactly when our turn comes. So a release wakes one waiter, not the
   * queue. Look again after the grace regardless (a stopped front waiter).
   */
  #behind(tx: TransitionContext, ahead: number, refusal: () => LeaseHeldError): Refused {
    return { refusal, watch: this.waitPath(tx.safe, ahead), watchMode: 'writers', until: tx.now + this.#graceMs };
  }

  /**
   * Joins `place` at the back of the line: the ticket of the waiter now just ahead of it, if any.
   * Its flocked `.wait` file comes first, then the entry (written by the caller). A full queue, or a
   * ticket's `.wait` file somebody holds, leaves it unqueued (it waits as a non-waiting acquire
   * retries).
   */
  #join(tx: TransitionContext, read: QueueRead, place: Place): number | undefined {
    const shape = shapeOf(read);
    if (shape !== undefined && shape.count <= QUEUE_PRUNE_AT) {
      // The usual case, as text: the entry goes before the tail.
      const waiter = { ticket: nextTicket(shape.maxTicket, tx.now), owner: place.owner, ttlMs: this.#ttlMs };
      const text = withWaiter(read.text, shape, waiter);
      if (!this.#takePlace(tx.safe, place, waiter, text)) return undefined;
      changeText(read, text);
      return shape.count > 0 ? shape.lastTicket : undefined;
    }
    const queue = entries(read);
    if (queue.waiters.length > QUEUE_PRUNE_AT) this.#pruneDeadWaiters(tx.safe, queue);
    const waiter = { ticket: nextTicket(maxTicket(queue), tx.now), owner: place.owner, ttlMs: this.#ttlMs };
    queue.waiters.push(waiter);
    if (!this.#takePlace(tx.safe, place, waiter, formatQueue(queue))) {
      queue.waiters.pop();
      return undefined;
    }
    return queue.waiters.length > 1 ? queue.waiters[queue.waiters.length - 2]!.ticket : undefined;
  }

  /** Flocks `waiter`'s `.wait` file for `place`, unless the queue's `text` with it is too long. */
  #takePlace(safe: string, place: Place, waiter: QueuedWaiter, text: string): boolean {
    const fd = text.length <= MAX_QUEUE_TEXT ? this.#io.lockFile(this.waitPath(safe, waiter.ticket)) : undefined;
    if (fd === undefined) return false;
    place.ticket = waiter.ticket;
    place.fd = fd;
    return true;
  }

  /**
   * The queued waiter a release (of generation `token`) hands the lease to: the first live one
   * (dead ones are dropped, and the queue written back), with the token it gets.
   */
  nextInLine(tx: TransitionContext, token: bigint): HandOff | undefined {
    const read = this.#read(tx);
    let found: QueuedWaiter | undefined;
    for (let front = frontOf(read); front !== undefined; front = frontOf(read)) {
      const path = this.waitPath(tx.safe, front.ticket);
      if (this.#io.probeLive(path) && tx.now + front.ttlMs <= MAX_EXPIRY_MS) {
        found = front;
        break;
      }
      dropFront(read); // its process is gone
      this.#removeQuietly(path);
    }
    const next = found === undefined ? undefined : nextToken(token, tx.now);
    if (found === undefined || next === undefined) {
      this.#flush(tx, read);
      return undefined;
    }
    return { waiter: found, next };
  }

  /** After a hand-off took the front waiter nextInLine named (or found it gone): it leaves the
   * line, the lease is no longer reserved, and the queue is written back. */
  handedOff(tx: TransitionContext): void {
    const read = this.#read(tx);
    dropFront(read, 0);
    this.#flush(tx, read);
  }

  /** Gives up a place in the queue: the entry goes stale and is pruned by whoever meets it. */
  leave(safe: string, place: Place | undefined): void {
    if (place?.fd === undefined) return;
    this.#closeOrDefer(safe, place.fd);
    this.#removeQuietly(this.waitPath(safe, place.ticket!));
    place.fd = undefined;
    place.ticket = undefined;
  }

  /**
   * The live waiter a free lease is reserved for, unless it is this transition's own. Drops dead
   * waiters from the front, and skips one that has not come for the lease within the grace (it
   * rejoins at the back when it wakes). Changes `queue` in place; the caller writes it back.
   */
  #waiterAhead(tx: TransitionContext, queue: WaitQueue): number | undefined {
    const { now } = tx;
    while (queue.waiters.length > 0) {
      const front = queue.waiters[0]!.ticket;
      if (front === tx.place?.ticket) return undefined;
      const path = this.waitPath(tx.safe, front);
      if (!this.#io.probeLive(path)) {
        queue.waiters.shift(); // its process is gone
        queue.freeSince = 0;
        this.#removeQuietly(path);
        continue;
      }
      if (queue.freeSince === 0) queue.freeSince = now;
      if (now - queue.freeSince < this.#graceMs) return front;
      queue.waiters.shift(); // alive but not coming: let the next one go
      queue.freeSince = now;
    }
    return undefined;
  }

  /** The queue as the caller read it under this transition's lock (its text): not read again. */
  readBy(tx: TransitionContext, text: string): void {
    tx.queue = { written: text, text, shape: undefined, entries: undefined };
  }

  /** The queue under the transition lock: read at the transition's first need of it. */
  #read(tx: TransitionContext): QueueRead {
    if (tx.queue === undefined) this.readBy(tx, queueText(this.#io.readLockData(tx.lockFd)));
    return tx.queue!;
  }

  /** Writes the queue if this transition changed it. */
  #flush(tx: TransitionContext, read: QueueRead): void {
    const text = read.entries === undefined ? read.text : formatQueue(read.entries);
    if (text === read.written) return;
    this.#io.writeLockData(tx.lockFd, text);
    read.written = text;
  }

  #pruneDeadWaiters(safe: string, queue: WaitQueue): void {
    for (let i = queue.waiters.length - 1; i >= 0; i--) {
      const path = this.waitPath(safe, queue.waiters[i]!.ticket);
      if (!this.#io.probeLive(path)) {
        queue.waiters.splice(i, 1);
        this.#removeQuietly(path);
      }
    }
  }

  #removeQuietly(path: string): void {
    try {
      this.#io.removeFile(path);
    } catch {
      // A leftover .wait file of a dead waiter is harmless (nobody holds it); prune takes it later.
    }
  }
}

/** The text's shape while the queue is still text in formatQueue's own layout; else `undefined`
 * (and the queue is built into entries). */
function shapeOf(read: QueueRead): QueueShape | undefined {
  if (read.entries !== undefined) return undefined;
  read.shape ??= scanOwnQueue(read.text);
  if (read.shape === undefined) read.entries = parseQueue(read.text); // the general reader's
  return read.shape;
}

/** The queue's entries, built once (see QueueRead). */
function entries(read: QueueRead): WaitQueue {
  return (read.entries ??= parseQueue(read.text));
}

function count(read: QueueRead): number {
  return shapeOf(read)?.count ?? read.entries!.waiters.length;
}

function frontOf(read: QueueRead): QueuedWaiter | undefined {
  const shape = shapeOf(read);
  if (shape === undefined) return read.entries!.waiters[0];
  return shape.count > 0 ? frontWaiter(read.text) : undefined;
}

/** The queue without its front waiter; with `freeSince` if given (as it was, if not). */
function dropFront(read: QueueRead, freeSince?: number): void {
  const shape = shapeOf(read);
  if (shape === undefined) {
    const queue = read.entries!;
    queue.waiters.shift();
    if (freeSince !== undefined) queue.freeSince = freeSince;
  } else if (shape.count > 0) changeText(read, withoutFront(read.text, shape, freeSince ?? shape.freeSince));
}

function changeText(read: QueueRead, text: string): void {
  read.text = text;
  read.shape = undefined;
}
