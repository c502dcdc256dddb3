/**
 * A string-keyed hash table (open addressing, linear probing) with a Map-like API.
 *
 * Why not Map: when a Map/Set resizes, V8 leaves the obsolete hash table pointing to its successor
 * (for live iterators), entries included. Under a steady churn of unique keys — a pending request
 * per reply, a lock entry per acquire — once one obsolete table is promoted to the old generation
 * it keeps every later table, and everything they referenced, alive until the next full GC; each
 * young collection then copies megabytes (measured on the server: 400 KB surviving each scavenge
 * on average instead of 20 KB, p99 ×3-4, throughput −30 %). And not a dictionary object either:
 * it internalizes every new key string, about 2.5× slower than a Map for unique keys. Here a resize
 * allocates fresh arrays and clears the old ones, so nothing old points at anything new.
 *
 * The hash is seeded per process (keys on the server come from the network; a seed makes it hard
 * to aim many keys at one probe sequence).
 */
const SEED = (Math.random() * 0x100000000) | 0;
const MIN_CAPACITY = 16;
/** A table is shrunk only above this capacity. Below it, a key count that swings by 4× or more
 * (every lock loop of a connection granted in one batch and released in the next) would rebuild
 * the table every few batches: measured on the server at 4×16, one rebuild per 30 cycles. */
const SHRINK_ABOVE = 1024;
/** Marks a deleted slot (probe sequences continue past it). Never a real key: keys here are
 * protocol names or decimal numbers, which cannot contain NUL. */
const TOMBSTONE = '\u0000deleted';

function hashOf(key: string): number {
  let h = SEED ^ key.length;
  for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 0x01000193);
  // murmur3 finalizer: spread the bits before masking to a power of two.
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return h ^ (h >>> 16);
}

export class Table<T> {
  #keys: Array<string | undefined> = new Array<string | undefined>(MIN_CAPACITY).fill(undefined);
  #values: Array<T | undefined> = new Array<T | undefined>(MIN_CAPACITY).fill(undefined);
  #mask = MIN_CAPACITY - 1;
  #size = 0;
  /** Live plus deleted slots: probe sequences end only at never-used slots. */
  #used = 0;

  get size(): number {
    return this.#size;
  }

  get(key: string): T | undefined {
    const keys = this.#keys;
    const mask = this.#mask;
    for (let i = hashOf(key) & mask; ; i = (i + 1) & mask) {
      const k = keys[i];
      if (k === undefined) return undefined;
      if (k === key) return this.#values[i];
    }
  }

  has(key: string): boolean {
    return this.get(key) !== undefined;
  }

  /** Values must not be `undefined`. Returns the value it replaced, if any. */
  set(key: string, value: T): T | undefined {
    const keys = this.#keys;
    const mask = this.#mask;
    let free = -1;
    let i = hashOf(key) & mask;
    for (; ; i = (i + 1) & mask) {
      const k = keys[i];
      if (k === undefined) break;
      if (k === key) {
        const previous = this.#values[i];
        this.#values[i] = value;
        return previous;
      }
      if (k === TOMBSTONE && free < 0) free = i;
    }
    if (free >= 0) {
      keys[free] = key;
      this.#values[free] = value;
    } else {
      keys[i] = key;
      this.#values[i] = value;
      this.#used++;
    }
    this.#size++;
    // Keep at least half the slots never used, so probes stay short.
    if (this.#used * 2 > mask + 1) this.#resize();
    return undefined;
  }

  delete(key: string): boolean {
    return this.take(key) !== undefined;
  }

  /** Removes the key; returns its value, if it had one. */
  take(key: string): T | undefined {
    const keys = this.#keys;
    const mask = this.#mask;
    for (let i = hashOf(key) & mask; ; i = (i + 1) & mask) {
      const k = keys[i];
      if (k === undefined) return undefined;
      if (k === key) {
        const value = this.#values[i];
        keys[i] = TOMBSTONE;
        this.#values[i] = undefined;
        this.#size--;
        if (this.#size * 8 < mask + 1 && mask + 1 > SHRINK_ABOVE) this.#resize();
        return value;
      }
    }
  }

  /** A snapshot of the values (for the rare paths that walk the table). */
  values(): T[] {
    const out: T[] = [];
    const keys = this.#keys;
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i];
      if (k !== undefined && k !== TOMBSTONE) out.push(this.#values[i]!);
    }
    return out;
  }

  clear(): void {
    this.#keys.fill(undefined);
    this.#values.fill(undefined);
    this.#size = 0;
    this.#used = 0;
  }

  /** Rebuilds at 4× the live count (rounded to a power of two), dropping tombstones. */
  #resize(): void {
    let capacity = MIN_CAPACITY;
    while (capacity < this.#size * 4) capacity *= 2;
    const oldKeys = this.#keys;
    const oldValues = this.#values;
    this.#keys = new Array<string | undefined>(capacity).fill(undefined);
    this.#values = new Array<T | undefined>(capacity).fill(undefined);
    this.#mask = capacity - 1;
    this.#used = this.#size;
    const keys = this.#keys;
    const values = this.#values;
    const mask = this.#mask;
    for (let j = 0; j < oldKeys.length; j++) {
      const k = oldKeys[j];
      if (k === undefined || k === TOMBSTONE) continue;
      let i = hashOf(k) & mask;
      while (keys[i] !== undefined) i = (i + 1) & mask;
      keys[i] = k;
      values[i] = oldValues[j];
    }
    // The old arrays may already be in the old generation: leave them pointing at nothing.
    oldKeys.fill(undefined);
    oldValues.fill(undefined);
  }
}
