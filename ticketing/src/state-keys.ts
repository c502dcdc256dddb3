/**
 * The state machine's registered keys (state.ts): a table by name, and the registration order the
 * sweep walks. A Table, not a Map, and links cleared on removal: see table.ts (a churning Map keeps
 * dead entries reachable from the old generation and slows every young GC).
 */
import type { KeyEntry } from './state-entries.js';
import { Table } from './table.js';

export class KeyRegistry {
  readonly #table = new Table<KeyEntry>();
  /** Registration order: oldest and newest key. */
  oldest: KeyEntry | undefined;
  #newest: KeyEntry | undefined;

  get size(): number {
    return this.#table.size;
  }

  get(key: string): KeyEntry | undefined {
    return this.#table.get(key);
  }

  /** A new entry for `key`, newest in registration order. */
  register(key: string, permits: number, watched: boolean): KeyEntry {
    const fresh: KeyEntry = {
      key,
      permits,
      oldest: undefined,
      newest: undefined,
      grantCount: 0,
      head: undefined,
      tail: undefined,
      waiting: 0,
      rev: 0n,
      revAt: 0,
      watched,
      olderKey: this.#newest,
      newerKey: undefined,
    };
    this.#table.set(key, fresh);
    if (this.#newest === undefined) this.oldest = fresh;
    else this.#newest.newerKey = fresh;
    this.#newest = fresh;
    return fresh;
  }

  delete(entry: KeyEntry): void {
    this.#table.delete(entry.key);
    const { olderKey, newerKey } = entry;
    if (olderKey === undefined) this.oldest = newerKey;
    else olderKey.newerKey = newerKey;
    if (newerKey === undefined) this.#newest = olderKey;
    else newerKey.olderKey = olderKey;
    entry.olderKey = entry.newerKey = undefined;
  }
}
