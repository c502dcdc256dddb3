/**
 * One server-sent event stream of `GET /v1/locks/events`: a `snapshot` of the held keys first,
 * then `keys` events with what changed, and a `node` event every second. The format is in
 * docs (the console's section); every event's `data` is one line of JSON.
 *
 * A slow reader gets the latest state, not a backlog: while more than `maxBufferedBytes` wait
 * to be written, nothing more is written; the keys that changed meanwhile are remembered by name
 * only (at most `maxKeys` of them, else a new snapshot is due) and read again once the output
 * drained. A stream follows at most `maxKeys` keys; one with more matching keys is `truncated`
 * and sends a new snapshot (at most once per `resnapshotMs`) instead of changes.
 */
import type { KeyRow, LockRows } from './lock-rows.js';
import type { NodeView } from './node-status.js';

/** The part of an http.ServerResponse a stream writes to. */
export interface StreamOutput {
  write(chunk: string): boolean;
  readonly writableLength: number;
  once(event: 'drain', listener: () => void): unknown;
  end(done: () => void): unknown;
  destroy(): unknown;
}

export interface StreamLimits {
  readonly maxKeys: number;
  readonly maxBufferedBytes: number;
  readonly resnapshotMs: number;
  /** A stream whose output has not drained for this long is cut off. */
  readonly stallMs: number;
}

export class LockStream {
  readonly #output: StreamOutput;
  readonly #rows: LockRows;
  readonly #prefix: string;
  readonly #limits: StreamLimits;
  readonly #nodeView: () => NodeView;
  /** The keys the reader has, as of the last event written. */
  readonly #known = new Set<string>();
  /** Keys that may have changed since. */
  readonly #pending = new Set<string>();
  #snapshotDue = true;
  #truncated = false;
  #lastSnapshot = -Infinity;
  #nodeDue = false;
  /** Since when the output has been waiting to drain (undefined: it is not). */
  #backedUpSince: number | undefined;
  #ended = false;

  constructor(output: StreamOutput, rows: LockRows, prefix: string, limits: StreamLimits, nodeView: () => NodeView) {
    this.#output = output;
    this.#rows = rows;
    this.#prefix = prefix;
    this.#limits = limits;
    this.#nodeView = nodeView;
  }

  /** These keys may have changed. */
  changed(keys: Iterable<string>): void {
    if (this.#snapshotDue) return;
    for (const key of keys) {
      if (!key.startsWith(this.#prefix)) continue;
      this.#pending.add(key);
      if (this.#pending.size > this.#limits.maxKeys) {
        this.reset();
        return;
      }
    }
  }

  /** Everything may have changed (a new leader's table, none): a new snapshot is due. */
  reset(): void {
    this.#snapshotDue = true;
    this.#pending.clear();
  }

  /** A `node` event is due. */
  nodeChanged(): void {
    this.#nodeDue = true;
  }

  /** Writes what is due, unless the output is backed up. A query that throws ends the stream
   * (cut off: its reader reconnects), not the server. */
  flush(now: number): void {
    try {
      this.#flush(now);
    } catch {
      this.#ended = true;
      this.#output.destroy();
    }
  }

  #flush(now: number): void {
    if (this.#ended) return;
    if (this.#backedUpSince !== undefined) {
      if (now - this.#backedUpSince > this.#limits.stallMs) this.#output.destroy();
      return;
    }
    let chunk = '';
    const resnapshot =
      this.#truncated && this.#pending.size > 0 && now - this.#lastSnapshot >= this.#limits.resnapshotMs;
    if (this.#snapshotDue || resnapshot) chunk = this.#snapshot(now);
    else if (this.#pending.size > 0 && !this.#truncated) chunk = this.#changes();
    if (this.#nodeDue) chunk += event('node', this.#nodeView());
    this.#nodeDue = false;
    if (chunk === '') return;
    this.#output.write(chunk);
    if (this.#output.writableLength > this.#limits.maxBufferedBytes) {
      this.#backedUpSince = now;
      this.#output.once('drain', () => {
        this.#backedUpSince = undefined;
        this.flush(performance.now());
      });
    }
  }

  /** Ends the stream with a last event (`unauthorized`, …) that tells the reader why. */
  end(why: string): Promise<void> {
    if (this.#ended) return Promise.resolve();
    this.#ended = true;
    this.#output.write(event(why, {}));
    return new Promise((resolve) => this.#output.end(resolve));
  }

  #snapshot(now: number): string {
    const limit = this.#limits.maxKeys;
    const keys = this.#rows.list(this.#prefix, limit + 1);
    this.#truncated = keys.length > limit;
    if (this.#truncated) keys.length = limit;
    this.#known.clear();
    for (const row of keys) this.#known.add(row.key);
    this.#pending.clear();
    this.#snapshotDue = false;
    this.#lastSnapshot = now;
    this.#nodeDue = false;
    return event('snapshot', { prefix: this.#prefix, truncated: this.#truncated, node: this.#nodeView(), keys });
  }

  #changes(): string {
    const upsert: KeyRow[] = [];
    const remove: string[] = [];
    const skipped: string[] = [];
    for (const key of this.#pending) {
      const row = this.#rows.get(key);
      if (row !== undefined) {
        if (!this.#known.has(key) && this.#known.size >= this.#limits.maxKeys) {
          skipped.push(key); // kept pending: a snapshot follows within resnapshotMs
          continue;
        }
        this.#known.add(key);
        upsert.push(row);
      } else if (this.#known.delete(key)) {
        remove.push(key);
      }
    }
    this.#pending.clear();
    for (const key of skipped) this.#pending.add(key);
    if (skipped.length > 0) this.#truncated = true;
    return upsert.length + remove.length === 0 ? '' : event('keys', { upsert, remove, truncated: this.#truncated });
  }
}

function event(name: string, data: unknown): string {
  return `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;
}
