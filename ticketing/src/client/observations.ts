/**
 * The election's side of the observe lane (docs/ticketing-election-client.md): the answers to
 * publishes (`P`/`G`, matched by (key, token)), and observations: `V` lines routed by key to every
 * observer of the key, one server observation per key however many observers share it, `O` sent
 * again on every new serving connection, `U` once the last observer of a key leaves.
 *
 * An observer keeps only the newest view it has not taken yet (a slow consumer costs one view,
 * never a backlog, and never reads a stale one), and takes a view only when its rev is above every
 * rev it already yielded (a re-sent `O`, a reconnect or a failover may repeat one).
 */
import type { View } from '../election-wire.js';
import { formatObserve, formatUnobserve } from '../election-wire.js';
import { LockLostError, ObservationLimitError } from '../errors.js';
import type { Reply } from '../protocol.js';
import type { RefusalClass } from './outcomes.js';
import type { Pending, PendingPublish, PendingRegistry } from './pending.js';

/** What an observer sees of a key. */
export interface ObservedView {
  /** The key's revision: every change of its holder or its value raises it. */
  readonly rev: bigint;
  /** Its one exclusive holder, with the value it published (null before it publishes); null when
   * the key is vacant or has several (shared or semaphore) holders. */
  readonly holder: { readonly owner: string; readonly token: bigint; readonly value: string | null } | null;
  /** 0: vacant; 1: one holder; N: N shared holders, or N permits of a semaphore in use. */
  readonly holders: number;
}

/** `client.observe()`: the key's views, in rev order, until it is ended. */
export interface Observation extends AsyncIterableIterator<ObservedView, undefined> {
  /** Ends the observation (the server is told when it was the key's last observer). */
  return(): Promise<IteratorReturnResult<undefined>>;
}

/** What the observations need of the lane they ride on. */
export interface ObservationLink {
  /** Writes `line` if the connection is serving (true); otherwise makes sure one is on its way
   * while anything is observed (false): `opened()` is called on it first. */
  send(line: string): boolean;
  /** Settles a sent request whose reply was matched here (the caller resolves it). */
  answered(p: Pending): void;
}

interface Entry {
  readonly key: string;
  readonly observers: Set<Observer>;
  /** The newest view received on the current connection. */
  view: ObservedView | undefined;
  /** An `O` went out on the current connection. */
  sent: boolean;
  /** `U`s sent on the current connection and not yet confirmed. */
  unconfirmed: number;
}

export class Observations {
  readonly #entries = new Map<string, Entry>();
  #observers = 0;

  constructor(
    private readonly link: ObservationLink,
    private readonly registry: PendingRegistry,
  ) {}

  /** Something is observed: the lane keeps a connection. */
  get wanted(): boolean {
    return this.#observers > 0;
  }

  observe(key: string, signal: AbortSignal | undefined): Observation {
    let entry = this.#entries.get(key);
    if (entry === undefined) {
      entry = { key, observers: new Set(), view: undefined, sent: false, unconfirmed: 0 };
      this.#entries.set(key, entry);
    }
    const shared = entry;
    const observer = new Observer(signal, (o) => this.#leave(shared, o));
    entry.observers.add(observer);
    this.#observers++;
    // A live observation's newest view is the key's current state; otherwise the server's V is.
    if (entry.view !== undefined) observer.offer(entry.view);
    else if (!entry.sent) entry.sent = this.link.send(formatObserve(key));
    return observer;
  }

  /** A new serving connection: it starts with an `O` for every observed key. */
  opened(): void {
    for (const entry of this.#entries.values()) {
      if (entry.observers.size > 0 && !entry.sent) entry.sent = this.link.send(formatObserve(entry.key));
    }
  }

  /** The connection ended: the server forgot our observations. `refused`: it refused the
   * connection (a wrong secret, a certificate): every observer ends with that refusal. */
  lost(refused?: { readonly error: RefusalClass; readonly cause: unknown }): void {
    for (const entry of [...this.#entries.values()]) {
      entry.sent = false;
      entry.view = undefined;
      entry.unconfirmed = 0;
      if (entry.observers.size === 0) this.#entries.delete(entry.key);
      if (refused === undefined) continue;
      const why = refused.cause instanceof Error ? refused.cause.message : String(refused.cause);
      for (const o of [...entry.observers]) {
        o.end(new refused.error(`observing ${entry.key} failed: ${why}`, 'observe', entry.key, undefined, undefined));
      }
    }
  }

  /** Ends every observer with `error` (the client closed). */
  endAll(error: Error): void {
    for (const entry of [...this.#entries.values()]) for (const o of [...entry.observers]) o.end(error);
  }

  /** A reply the lane did not match: true if it is ours (false: the lane treats it as out of place). */
  take(reply: Reply): boolean {
    switch (reply.op) {
      case 'P':
      case 'G': {
        const p = this.registry.findPublish(reply.token, reply.key);
        if (p === undefined || p.sentAt < 0) return false;
        this.link.answered(p);
        if (reply.op === 'P') p.resolve({ key: p.key, token: p.token, value: p.value });
        else p.reject(notPublished(p));
        return true;
      }
      case 'V': {
        const entry = this.#entries.get(reply.key);
        if (entry === undefined) return false;
        const view = observedView(BigInt(reply.rev), reply.view);
        if (entry.view === undefined || view.rev > entry.view.rev) entry.view = view;
        for (const o of entry.observers) o.offer(view);
        return true;
      }
      case 'U':
        return this.#unobserved(reply.key, reply.busy);
    }
    return false;
  }

  #unobserved(key: string, busy: boolean): boolean {
    const entry = this.#entries.get(key);
    if (entry === undefined) return false;
    if (busy) {
      // Our one `O` on this connection was refused; nothing is observed, so no `U` is owed.
      entry.sent = false;
      for (const o of [...entry.observers]) {
        o.end(new ObservationLimitError(`observing ${key} was refused: the server is at its observation limit`, key));
      }
      return true;
    }
    if (entry.unconfirmed === 0) return false;
    entry.unconfirmed--;
    if (entry.unconfirmed === 0 && entry.observers.size === 0) this.#entries.delete(key);
    return true;
  }

  #leave(entry: Entry, observer: Observer): void {
    if (!entry.observers.delete(observer)) return;
    this.#observers--;
    if (entry.observers.size > 0) return;
    entry.view = undefined;
    if (entry.sent) {
      entry.sent = false;
      if (this.link.send(formatUnobserve(entry.key))) entry.unconfirmed++;
    }
    if (entry.unconfirmed === 0) this.#entries.delete(entry.key);
  }
}

function observedView(rev: bigint, view: View): ObservedView {
  if (view.holders === 0) return { rev, holder: null, holders: 0 };
  if (view.holders === 'many') return { rev, holder: null, holders: view.count };
  return { rev, holder: { owner: view.owner, token: BigInt(view.token), value: view.value ?? null }, holders: 1 };
}

/** The server's `G` to a publish: the key is not held exclusively under this token. */
function notPublished(p: PendingPublish): LockLostError {
  return new LockLostError(
    `${p.key} is not held exclusively under token ${p.token} (released, expired, taken over, never granted, or held shared): nothing was published`,
    p.key,
    p.token,
    'gone',
  );
}

type Waiter = {
  readonly resolve: (result: IteratorResult<ObservedView, undefined>) => void;
  readonly reject: (error: unknown) => void;
};

const DONE: IteratorReturnResult<undefined> = { value: undefined, done: true };

/** One `observe()` call: its newest unread view, and the `next()` calls waiting for one. */
class Observer implements Observation {
  /** The highest rev yielded. */
  #yielded = -1n;
  #latest: ObservedView | undefined;
  #waiters: Waiter[] = [];
  #ended = false;
  /** The error that ended it, until a `next()` has thrown it. */
  #error: Error | undefined;
  readonly #signal: AbortSignal | undefined;
  readonly #onEnd: (o: Observer) => void;
  readonly #onAbort = (): void => this.end();

  constructor(signal: AbortSignal | undefined, onEnd: (o: Observer) => void) {
    this.#signal = signal;
    this.#onEnd = onEnd;
    signal?.addEventListener('abort', this.#onAbort, { once: true });
  }

  offer(view: ObservedView): void {
    if (this.#ended || view.rev <= this.#yielded || (this.#latest !== undefined && view.rev <= this.#latest.rev))
      return;
    const waiter = this.#waiters.shift();
    if (waiter === undefined) {
      this.#latest = view;
      return;
    }
    this.#yielded = view.rev;
    waiter.resolve({ value: view, done: false });
  }

  next(): Promise<IteratorResult<ObservedView, undefined>> {
    const view = this.#latest;
    if (view !== undefined) {
      this.#latest = undefined;
      this.#yielded = view.rev;
      return Promise.resolve({ value: view, done: false });
    }
    if (this.#error !== undefined) {
      const error = this.#error;
      this.#error = undefined;
      return Promise.reject(error);
    }
    if (this.#ended) return Promise.resolve(DONE);
    return new Promise((resolve, reject) => this.#waiters.push({ resolve, reject }));
  }

  return(): Promise<IteratorReturnResult<undefined>> {
    this.end();
    return Promise.resolve(DONE);
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  /** Ends it: the waiting `next()` settles done, or (the first) with `error`; an unread view is
   * dropped (it is no longer known to be current). */
  end(error?: Error): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#latest = undefined;
    this.#signal?.removeEventListener('abort', this.#onAbort);
    const waiters = this.#waiters;
    this.#waiters = [];
    if (error !== undefined && waiters.length === 0) this.#error = error;
    waiters.forEach((w, i) => (i === 0 && error !== undefined ? w.reject(error) : w.resolve(DONE)));
    this.#onEnd(this);
  }
}
