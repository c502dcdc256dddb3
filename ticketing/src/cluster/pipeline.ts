/**
 * The leader's commit window, sans I/O: which state changes go into the next etcd txn, when it
 * may be sent, and which held replies may leave once txns commit. The node's commit loop
 * (commit-loop.ts) sends what `take` returns and reports each commit with `committed`.
 *
 * Its invariant: no two batches in flight write one key; replies leave in send order; no batch
 * carries a token above the committed reservation unless it carries the new mark itself or goes
 * after the batch that does. Why these rules suffice: docs/ticketing-cluster.md, "The commit
 * window" and its "Tokens".
 */
import { TOKEN_RESERVE_MS, markAhead, reservationLow } from '#kernel';
import type { HeldReply } from '../server/cluster-host.js';

const RESERVE = BigInt(TOKEN_RESERVE_MS * 1000);

export interface Batch {
  /** Keys whose state this batch writes (a put of the current grant, or a delete). */
  readonly touched: Set<string>;
  readonly grants: Array<{ readonly key: string; readonly token: bigint }>;
  readonly replies: HeldReply[];
  /** The reservation mark this batch writes, if it carries one. */
  mark: bigint | undefined;
  committed: boolean;
}

const newBatch = (): Batch => ({ touched: new Set(), grants: [], replies: [], mark: undefined, committed: false });

export class CommitWindow {
  /** Most batches in flight at once. */
  readonly size: number;
  #open = newBatch();
  /** Sent and not yet delivered, in the order they were sent. */
  readonly #inFlight: Batch[] = [];
  /** Keys written by a batch in flight and not yet committed. */
  readonly #busy = new Set<string>();
  /** Every token up to this is covered by a committed reservation. */
  #committedMark: bigint;
  /** The mark a batch in flight writes, if any. */
  #pendingMark: bigint | undefined;

  /** `committedMark`: the reservation as the new term read it (tokens above it are not yet covered). */
  constructor(size: number, committedMark: bigint) {
    this.size = size;
    this.#committedMark = committedMark;
  }

  /** Batches sent and not yet delivered. */
  get inFlight(): number {
    return this.#inFlight.length;
  }

  /** Nothing open and nothing in flight. */
  get idle(): boolean {
    return this.#inFlight.length === 0 && isEmpty(this.#open);
  }

  grant(key: string, token: bigint): void {
    this.#open.grants.push({ key, token });
    this.#open.touched.add(key);
  }

  touch(key: string): void {
    this.#open.touched.add(key);
  }

  hold(reply: HeldReply): void {
    this.#open.replies.push(reply);
  }

  /**
   * The open batch, closed and counted in flight, if it may be sent now: there is something in
   * it, room in the window, no key of it in flight, and its tokens covered by a committed mark or
   * by the mark it carries. `lastToken` is the state's; `wallMs` the clock tokens are taken from.
   */
  take(lastToken: bigint, wallMs: number): Batch | undefined {
    const batch = this.#open;
    if (isEmpty(batch) || this.#inFlight.length >= this.size) return undefined;
    for (const key of batch.touched) if (this.#busy.has(key)) return undefined;
    if (this.#pendingMark === undefined) {
      if (reservationLow(this.#committedMark, lastToken, wallMs, RESERVE)) {
        batch.mark = markAhead(lastToken, wallMs, RESERVE);
        this.#pendingMark = batch.mark;
      }
    } else if (lastToken > this.#committedMark) {
      return undefined; // its tokens rest on the mark in flight: after it, never beside it
    }
    this.#open = newBatch();
    this.#inFlight.push(batch);
    for (const key of batch.touched) this.#busy.add(key);
    return batch;
  }

  /** `batch` committed: returns the batches whose replies may leave now, in order. */
  committed(batch: Batch): Batch[] {
    batch.committed = true;
    for (const key of batch.touched) this.#busy.delete(key);
    if (batch.mark !== undefined) {
      if (batch.mark > this.#committedMark) this.#committedMark = batch.mark;
      this.#pendingMark = undefined;
    }
    let ready = 0;
    while (ready < this.#inFlight.length && this.#inFlight[ready]!.committed) ready++;
    return this.#inFlight.splice(0, ready);
  }
}

function isEmpty(batch: Batch): boolean {
  return batch.touched.size === 0 && batch.replies.length === 0;
}
