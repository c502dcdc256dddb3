/**
 * The keys the page knows, as the stream sent them: replaced whole by a snapshot, changed by
 * `keys` events. Each row remembers when it arrived, so that its leases count down from the
 * `expiresInMs` it carried. A view is the first rows in key order that match a prefix and still
 * have a holder or a waiter, with how many match in all.
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

/** Key order: `job/2` before `job/10`. */
const order = new Intl.Collator('en', { numeric: true }).compare;

export class KeyStore {
  readonly #rows = new Map<string, StoredRow>();
  /** The keys in order, or undefined when a key came or went since they were sorted. */
  #sorted: string[] | undefined;
  /** When the next lease runs out (performance.now() time), to render again then. */
  #nextExpiry = Infinity;

  get size(): number {
    return this.#rows.size;
  }

  replace(rows: readonly KeyRow[], now: number): void {
    this.#rows.clear();
    this.#sorted = undefined;
    this.#nextExpiry = Infinity;
    for (const row of rows) this.#put(row, now);
  }

  apply(upsert: readonly KeyRow[], remove: readonly string[], now: number): void {
    for (const key of remove) if (this.#rows.delete(key)) this.#sorted = undefined;
    for (const row of upsert) this.#put(row, now);
  }

  /** When the next lease runs out (Infinity: none). */
  get nextExpiry(): number {
    return this.#nextExpiry;
  }

  view(prefix: string, limit: number, now: number): View {
    this.#sorted ??= [...this.#rows.keys()].sort(order);
    const rows: StoredRow[] = [];
    let matching = 0;
    let nextExpiry = Infinity;
    for (const key of this.#sorted) {
      if (!key.startsWith(prefix)) continue;
      const stored = this.#rows.get(key)!;
      if (!live(stored, now)) continue;
      matching++;
      if (rows.length < limit) rows.push(stored);
      for (const ms of leftMs(stored, now)) if (ms > 0) nextExpiry = Math.min(nextExpiry, now + ms);
    }
    this.#nextExpiry = nextExpiry;
    return { rows, matching };
  }

  #put(row: KeyRow, now: number): void {
    if (!this.#rows.has(row.key)) this.#sorted = undefined;
    this.#rows.set(row.key, { row, at: now });
    for (const holder of row.holders) this.#nextExpiry = Math.min(this.#nextExpiry, now + holder.expiresInMs);
  }
}
