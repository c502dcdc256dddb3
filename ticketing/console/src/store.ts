/**
 * The keys the page knows, as the stream sent them: replaced whole by a snapshot, changed by
 * `keys` events. Each row remembers when it arrived, so that its leases count down from the
 * `expiresInMs` it carried. A view is the first rows that match a prefix and still have a holder
 * or a waiter, with how many match in all. Rows keep the server's order, oldest key first (as
 * `/v1/locks` lists them): a key the page did not have goes last; sorting 10,000 keys on every
 * change would cost more than the rest of a render.
 */
import type { KeyRow } from './wire.js';

export interface StoredRow {
  readonly row: KeyRow;
  /** performance.now() when it arrived. */
  readonly at: number;
}

export interface View {
  readonly rows: readonly StoredRow[];
  /** Rows that match, shown or not. */
  readonly matching: number;
}

/** The lease left of each holder of `stored` at `now`, ms (0 once it ran out). */
export function leftMs(stored: StoredRow, now: number): number[] {
  return stored.row.holders.map((holder) => Math.max(0, holder.expiresInMs - (now - stored.at)));
}

/** Is the row still worth showing at `now` (a holder whose lease runs, or a waiter)? */
function live(stored: StoredRow, now: number): boolean {
  return stored.row.waiters > 0 || leftMs(stored, now).some((ms) => ms > 0);
}

export class KeyStore {
  /** In the server's order (a Map keeps the order of insertion; a changed row keeps its place). */
  readonly #rows = new Map<string, StoredRow>();
  /** When the next lease runs out (performance.now() time), to render again then. */
  #nextExpiry = Infinity;

  get size(): number {
    return this.#rows.size;
  }

  replace(rows: readonly KeyRow[], now: number): void {
    this.#rows.clear();
    this.#nextExpiry = Infinity;
    for (const row of rows) this.#put(row, now);
  }

  apply(upsert: readonly KeyRow[], remove: readonly string[], now: number): void {
    for (const key of remove) this.#rows.delete(key);
    for (const row of upsert) this.#put(row, now);
  }

  /** When the next lease runs out (Infinity: none). */
  get nextExpiry(): number {
    return this.#nextExpiry;
  }

  view(prefix: string, limit: number, now: number): View {
    const rows: StoredRow[] = [];
    let matching = 0;
    let nextExpiry = Infinity;
    for (const [key, stored] of this.#rows) {
      if (!key.startsWith(prefix) || !live(stored, now)) continue;
      matching++;
      if (rows.length < limit) rows.push(stored);
      for (const ms of leftMs(stored, now)) if (ms > 0) nextExpiry = Math.min(nextExpiry, now + ms);
    }
    this.#nextExpiry = nextExpiry;
    return { rows, matching };
  }

  #put(row: KeyRow, now: number): void {
    this.#rows.set(row.key, { row, at: now });
    for (const holder of row.holders) this.#nextExpiry = Math.min(this.#nextExpiry, now + holder.expiresInMs);
  }
}
