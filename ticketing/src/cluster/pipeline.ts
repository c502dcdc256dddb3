/**
 * The leader's commit window, sans I/O: which state changes go into the next etcd txn, when it
 * may be sent, and which held replies may leave once txns commit. The node (node.ts) sends what
 * `take` returns and reports each commit with `committed`.
 *
 * - **Several txns in flight, never two on one key.** A batch is sent only when no txn in flight
 *   writes any key it writes, so one key's writes commit in the order the leader made them: a
 *   later write can never land under an earlier one, whatever order etcd applies disjoint txns in.
 *   A batch that touches a key in flight waits, and goes out when that txn commits.
 * - **Replies leave in commit order.** A batch's replies are delivered once it and every batch
 *   sent before it have committed. A failed or unknown txn ends the term (the node steps down
 *   and drops the window): every batch after it is dropped with its replies, exactly as at a
 *   step-down with one txn in flight.
 * - **Tokens are reserved ahead, not written per batch.** `hwm` holds a mark above every token
 *   issued so far, written (as in single mode's state file) `TOKEN_RESERVE_MS` worth of µs ahead
 *   and topped up when half is used, so it is rarely in a batch and batches do not all write one
 *   shared key. A batch carrying a token above the committed mark goes out with the mark's write,
 *   or after it: no committed txn carries a token above a committed mark, so a new leader, which
 *   starts above max(hwm, every stored token), never issues a token any client has seen.
 * - **No timer.** The node takes a batch in the turn after a request arrived; under load, batches
 *   form from what arrives while the window is full.
 */
import type { HeldReply } from '../server/cluster-host.js';
import { markAhead, reservationLow } from '../token-store.js';

/** Batches in flight by default: see docs/ticketing-bench.md, "Levers tried", for the measurement. */
export const DEFAULT_COMMIT_WINDOW = 4;
/** The most a node lets be in flight. */
export const MAX_COMMIT_WINDOW = 64;

/** How far ahead `hwm` reserves tokens (ms worth of µs tokens), as single mode's state file. */
export const TOKEN_RESERVE_MS = 60_000;
const RESERVE = BigInt(TOKEN_RESERVE_MS * 1000);

export interface Batch {
  /** Keys whose state this batch writes (a put of the current grant, or a delete). */
  readonly touched: Set<string>;
  readonly grants: Array<{ readonly key: string; readonly token: bigint }>;
  readonly replies: HeldReply[];
  /** The `hwm` mark this batch writes, if it carries one. */
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
  /** Every token up to this is covered by a committed `hwm`. */
  #committedMark: bigint;
  /** The mark a batch in flight writes, if any. */
  #pendingMark: bigint | undefined;

  /** `committedMark`: the `hwm` as the new term read it (tokens above it are not yet covered). */
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
