/**
 * The console's view of a key: one row per key, read from the server's read-only queries
 * (`locks`, `lock`, `inspect`): its kind, every holder with its own lease, and its queue.
 */
import type { LockView } from '../server/server.js';

/** One holder of a key, as `/v1/locks` and the console show it. */
export interface HolderRow {
  readonly owner: string;
  /** The fencing token, in decimal (a uint64 does not fit a JSON number). */
  readonly token: string;
  /** `x`, `s`, or `permit` (with its `slot`). */
  readonly mode: 'x' | 's' | 'permit';
  readonly slot?: number;
  /** Its published value (docs/ticketing-election.md), if any. */
  readonly value?: string;
  /** How long its lease has left when the row was read, whole ms (> 0). */
  readonly expiresInMs: number;
}

/** The rows of `lock`'s holders. */
export function holderRows(lock: LockView): HolderRow[] {
  return lock.holders.map((holder) => ({
    owner: holder.owner,
    token: String(holder.token),
    mode: lock.kind === 'semaphore' ? 'permit' : holder.shared ? 's' : 'x',
    ...(holder.slot === undefined ? {} : { slot: holder.slot }),
    ...(holder.value === undefined ? {} : { value: holder.value }),
    expiresInMs: Math.ceil(holder.expiresInMs),
  }));
}

export interface KeyRow {
  readonly key: string;
  /** `lock` (modes x and s) or `semaphore` (of `permits`). */
  readonly kind: 'lock' | 'semaphore';
  readonly permits?: number;
  /** The key's rev, in decimal (docs/ticketing-election.md). */
  readonly rev: string;
  readonly holders: readonly HolderRow[];
  /** Requests queued for the key. */
  readonly waiters: number;
  /** The owners of the first `QUEUE_SHOWN` of them, front first. */
  readonly queue: readonly string[];
}

/** What the rows are read from (TicketServer's queries). */
export interface RowServer {
  locks(options: { readonly prefix: string; readonly limit: number }): readonly LockView[];
  lock(key: string): LockView | undefined;
  inspect(key: string): { readonly waiters: ReadonlyArray<{ readonly owner: string }> } | undefined;
}

const QUEUE_SHOWN = 3;

export class LockRows {
  readonly #server: RowServer;

  constructor(server: RowServer) {
    this.#server = server;
  }

  /** The held keys starting with `prefix`, at most `limit`, oldest key first. */
  list(prefix: string, limit: number): KeyRow[] {
    return this.#server.locks({ prefix, limit }).map((held) => this.#row(held));
  }

  /** The key's row, or `undefined` when it is not held now. */
  get(key: string): KeyRow | undefined {
    const held = this.#server.lock(key);
    return held === undefined ? undefined : this.#row(held);
  }

  #row(held: LockView): KeyRow {
    const queue =
      held.waiters === 0
        ? []
        : (this.#server.inspect(held.key)?.waiters ?? []).slice(0, QUEUE_SHOWN).map((waiter) => waiter.owner);
    return {
      key: held.key,
      kind: held.kind,
      ...(held.permits === undefined ? {} : { permits: held.permits }),
      rev: String(held.rev),
      holders: holderRows(held),
      waiters: held.waiters,
      queue,
    };
  }
}
