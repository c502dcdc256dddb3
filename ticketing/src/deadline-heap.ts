/**
 * An indexed binary min-heap of deadlines: O(log n) insert, remove and re-key of any item (each
 * item knows its slot), so a waiter granted early or a key handed off leaves no stale entry
 * behind. Ties break by `seq`, the order the items were created in, which keeps the order in
 * which due work is done deterministic.
 */

export interface HeapItem {
  /** The deadline (ms, on the clock the state machine is driven with). */
  at: number;
  /** Creation order, for deterministic ties. */
  readonly seq: number;
  /** Slot in the heap; -1 when not in it. */
  heapIndex: number;
}

export class DeadlineHeap<T extends HeapItem> {
  readonly #items: T[] = [];

  get size(): number {
    return this.#items.length;
  }

  peek(): T | undefined {
    return this.#items[0];
  }

  has(item: T): boolean {
    return item.heapIndex >= 0 && this.#items[item.heapIndex] === item;
  }

  push(item: T): void {
    item.heapIndex = this.#items.length;
    this.#items.push(item);
    this.#up(item.heapIndex);
  }

  remove(item: T): void {
    const index = item.heapIndex;
    if (index < 0 || this.#items[index] !== item) return;
    const last = this.#items.pop()!;
    item.heapIndex = -1;
    if (last === item) return;
    this.#items[index] = last;
    last.heapIndex = index;
    this.#down(index);
    this.#up(last.heapIndex);
  }

  /** Moves an item to a new deadline (inserting it if it is not in the heap). */
  update(item: T, at: number): void {
    if (!this.has(item)) {
      item.at = at;
      this.push(item);
      return;
    }
    const earlier = at < item.at;
    item.at = at;
    if (earlier) this.#up(item.heapIndex);
    else this.#down(item.heapIndex);
  }

  #less(a: T, b: T): boolean {
    return a.at < b.at || (a.at === b.at && a.seq < b.seq);
  }

  #up(index: number): void {
    const items = this.#items;
    const item = items[index]!;
    while (index > 0) {
      const parentIndex = (index - 1) >> 1;
      const parent = items[parentIndex]!;
      if (!this.#less(item, parent)) break;
      items[index] = parent;
      parent.heapIndex = index;
      index = parentIndex;
    }
    items[index] = item;
    item.heapIndex = index;
  }

  #down(index: number): void {
    const items = this.#items;
    const n = items.length;
    const item = items[index]!;
    for (;;) {
      const left = 2 * index + 1;
      if (left >= n) break;
      const right = left + 1;
      const child = right < n && this.#less(items[right]!, items[left]!) ? right : left;
      const childItem = items[child]!;
      if (!this.#less(childItem, item)) break;
      items[index] = childItem;
      childItem.heapIndex = index;
      index = child;
    }
    items[index] = item;
    item.heapIndex = index;
  }
}
