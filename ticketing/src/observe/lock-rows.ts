/**
 * The console's view of a key: one row per key, read from the server's read-only queries
 * (`locks`, `lock`, `inspect`). The row has room for kinds other than an exclusive lock: a key
 * has a list of holders, each with its own lease.
 */

/** One holder of a key. */
interface HolderRow {
  readonly owner: string;
  /** The fencing token, in decimal (a uint64 does not fit a JSON number). */
  readonly token: string;
  /** How long its lease has left when the row was read, whole ms (> 0). */
  readonly expiresInMs: number;
}

export interface KeyRow {
  readonly key: string;
  /** `lock`: an exclusive lock, at most one holder. */
  readonly kind: 'lock';
  readonly holders: readonly HolderRow[];
  /** Requests queued for the key. */
  readonly waiters: number;
  /** The owners of the first `QUEUE_SHOWN` of them, front first. */
  readonly queue: readonly string[];
}

/** What the rows are read from (TicketServer's queries). */
export interface RowServer {
  locks(options: { readonly prefix: string; readonly limit: number }): ReadonlyArray<HeldLock>;
  lock(key: string): HeldLock | undefined;
  inspect(key: string): { readonly waiters: ReadonlyArray<{ readonly owner: string }> } | undefined;
}

interface HeldLock {
  readonly key: string;
  readonly owner: string;
  readonly token: bigint;
  readonly expiresInMs: number;
  readonly waiters: number;
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

  #row(held: HeldLock): KeyRow {
    const queue =
      held.waiters === 0
        ? []
        : (this.#server.inspect(held.key)?.waiters ?? []).slice(0, QUEUE_SHOWN).map((waiter) => waiter.owner);
    return {
      key: held.key,
      kind: 'lock',
      holders: [{ owner: held.owner, token: String(held.token), expiresInMs: Math.ceil(held.expiresInMs) }],
      waiters: held.waiters,
      queue,
    };
  }
}
