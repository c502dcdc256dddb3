/**
 * The state machine's queued requests (state.ts): each key's FIFO queue and each session's
 * requests, as intrusive lists whose links are cleared on removal, and a table by id for a wait's
 * timeout. Tables, not Maps: see table.ts. Deadlines stay with state.ts.
 */
import type { LockMode } from './modes.js';
import type { KeyEntry, Waiter } from './state-entries.js';
import type { SessionId } from './state-types.js';
import { Table } from './table.js';

interface SessionWaiters {
  head: Waiter | undefined;
}

export class WaiterRegistry {
  readonly #byId = new Table<Waiter>();
  readonly #bySession = new Table<SessionWaiters>();

  /** Queued requests, all keys together. */
  get size(): number {
    return this.#byId.size;
  }

  get(id: number): Waiter | undefined {
    return this.#byId.get(String(id));
  }

  /** Does the session have requests queued? */
  has(session: SessionId): boolean {
    return this.#bySession.get(String(session)) !== undefined;
  }

  /** A new waiter with id `id` (the state machine's sequence) at the back of the key's queue. */
  enqueue(
    entry: KeyEntry,
    id: number,
    session: SessionId,
    owner: string,
    mode: LockMode,
    at: number,
    now: number,
  ): Waiter {
    let mine = this.#bySession.get(String(session));
    if (mine === undefined) this.#bySession.set(String(session), (mine = { head: undefined }));
    const waiter: Waiter = {
      kind: 'wait',
      id,
      seq: id,
      at,
      heapIndex: -1,
      queuedAt: now,
      session,
      owner,
      mode,
      shared: mode === 's',
      entry,
      prev: entry.tail,
      next: undefined,
      sessionPrev: undefined,
      sessionNext: mine.head,
    };
    if (mine.head !== undefined) mine.head.sessionPrev = waiter;
    mine.head = waiter;
    if (entry.tail === undefined) entry.head = waiter;
    else entry.tail.next = waiter;
    entry.tail = waiter;
    entry.waiting++;
    this.#byId.set(String(id), waiter);
    return waiter;
  }

  /** Takes the waiter out of its key's queue, its session's list and the table. */
  unqueue(waiter: Waiter): void {
    const { entry } = waiter;
    if (waiter.prev === undefined) entry.head = waiter.next;
    else waiter.prev.next = waiter.next;
    if (waiter.next === undefined) entry.tail = waiter.prev;
    else waiter.next.prev = waiter.prev;
    waiter.prev = waiter.next = undefined;
    entry.waiting--;
    this.#byId.delete(String(waiter.id));
    const mine = this.#bySession.get(String(waiter.session))!;
    if (waiter.sessionPrev === undefined) mine.head = waiter.sessionNext;
    else waiter.sessionPrev.sessionNext = waiter.sessionNext;
    if (waiter.sessionNext !== undefined) waiter.sessionNext.sessionPrev = waiter.sessionPrev;
    waiter.sessionPrev = waiter.sessionNext = undefined;
    if (mine.head === undefined) this.#bySession.delete(String(waiter.session));
  }

  /** The session's waiters, oldest first (the list is newest first). */
  ofSession(session: SessionId): Waiter[] {
    const all: Waiter[] = [];
    for (let w = this.#bySession.get(String(session))?.head; w !== undefined; w = w.sessionNext) all.push(w);
    return all.sort((a, b) => a.id - b.id);
  }
}
