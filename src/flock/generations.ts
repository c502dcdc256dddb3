/**
 * The generations this process holds, by id, the commits that make them, and the cleanup an
 * operation could not finish (a close or a removal that failed: the id's next operation retries
 * it). Raw fds in a strong map: a FileHandle could be closed by garbage collection, silently
 * dropping the lock.
 */
import { yieldIfRunStarts } from '../port/turn.js';
import type { CommitPlan, CommitResult, LeaseIO } from './io.js';
import type { DirPaths } from './layout.js';
import { formatRecord, type LeaseRecord } from './record.js';
import type { Place } from './queue.js';

/** A generation whose liveness lock this process holds. */
export interface Generation {
  readonly token: bigint;
  readonly owner: string;
  readonly fd: number;
}

/** Cleanup that failed and is retried on the next operation for the same id. */
interface Pending {
  readonly closes: Set<number>;
  readonly removals: Set<string>;
}

export class Generations {
  readonly #io: LeaseIO;
  readonly #dir: string;
  readonly #paths: DirPaths;
  /** safeID → the generation this process holds. */
  readonly #held = new Map<string, Generation>();
  readonly #pending = new Map<string, Pending>();

  constructor(io: LeaseIO, dir: string, paths: DirPaths) {
    this.#io = io;
    this.#dir = dir;
    this.#paths = paths;
  }

  get(safe: string): Generation | undefined {
    return this.#held.get(safe);
  }

  holds(safe: string, owner: string, token: bigint): boolean {
    const held = this.#held.get(safe);
    return held?.token === token && held.owner === owner;
  }

  hasPending(safe: string): boolean {
    return this.#pending.has(safe);
  }

  /** Holds a generation whose `.live` this process created and flocked as `fd`. */
  hold(safe: string, owner: string, token: bigint, fd: number): void {
    this.#held.set(safe, { token, owner, fd });
  }

  /** Holds the generation a waiting `place`'s flocked `.wait` file became the `.live` of (a
   * hand-off, or a queued waiter's takeover); the place is left. */
  adopt(safe: string, place: Place, owner: string, token: bigint): void {
    const predecessor = this.#held.get(safe);
    if (predecessor !== undefined) this.drop(safe, predecessor);
    this.#held.set(safe, { token, owner, fd: place.fd! });
    place.fd = undefined;
    place.ticket = undefined;
  }

  /** Forgets the id's generation without closing it: the caller closes its fd (see Lease.release). */
  forget(safe: string): void {
    this.#held.delete(safe);
  }

  /** Closes the id's generation before a takeover replaces it. Fails closed: never hold two
   * generations of one id, so if the close throws, nothing changed. */
  closeBeforeTakeover(safe: string): void {
    const predecessor = this.#held.get(safe);
    if (predecessor === undefined) return;
    this.#io.closeFile(predecessor.fd);
    this.#held.delete(safe);
  }

  /** Forgets a generation and closes its liveness lock; a failed close is retried later. */
  drop(safe: string, generation: Generation): void {
    this.#held.delete(safe);
    this.closeOrDefer(safe, generation.fd);
  }

  closeOrDefer(safe: string, fd: number): void {
    try {
      this.#io.closeFile(fd);
    } catch {
      this.#pendingFor(safe).closes.add(fd); // the generation is still held here: retry, never forget it
    }
  }

  /** Files the id's next operation removes (a commit could not). */
  removeLater(safe: string, paths: Iterable<string | undefined>): void {
    for (const path of paths) if (path !== undefined) this.#pendingFor(safe).removals.add(path);
  }

  /** Writes the record (and whatever else the plan says) as one step; defers failed removals.
   * `splitTurn`: false for a commit a waiter in line is waiting on (see HandOffs.give). */
  async commit(
    safe: string,
    record: LeaseRecord,
    plan?: Omit<CommitPlan, 'record' | 'data'>,
    splitTurn = true,
  ): Promise<CommitResult> {
    const turn = splitTurn ? yieldIfRunStarts() : undefined;
    if (turn !== undefined) await turn;
    // Named fields, not `{ ...plan, record, data }`: V8 builds a spread followed by more fields on
    // a slow path, twice a cycle.
    const result = await this.#io.commit(this.#dir, {
      record: this.#paths.of(safe).record,
      data: formatRecord(record),
      live: plan?.live,
      adoptFrom: plan?.adoptFrom,
      remove: plan?.remove,
    });
    if (result.removalErrors.length > 0) this.removeLater(safe, failedPaths(result.removalErrors));
    return result;
  }

  /** Retries cleanup an earlier operation on this id could not finish. Under `failClosed`
   * (acquire) a predecessor generation that still will not close stops the operation. */
  retryPending(safe: string, failClosed: boolean): void {
    const pending = this.#pending.get(safe);
    if (pending === undefined) return;
    for (const fd of pending.closes) {
      try {
        this.#io.closeFile(fd);
        pending.closes.delete(fd);
      } catch (error) {
        if (failClosed) throw error;
      }
    }
    for (const path of pending.removals) {
      try {
        this.#io.removeFile(path);
        pending.removals.delete(path);
      } catch {
        // Still failing: an orphan .live file is harmless (nobody holds it); keep trying.
      }
    }
    if (pending.closes.size === 0 && pending.removals.size === 0) this.#pending.delete(safe);
  }

  #pendingFor(safe: string): Pending {
    let pending = this.#pending.get(safe);
    if (pending === undefined) this.#pending.set(safe, (pending = { closes: new Set(), removals: new Set() }));
    return pending;
  }
}

function* failedPaths(failures: readonly NodeJS.ErrnoException[]): Iterable<string | undefined> {
  for (const failure of failures) yield failure.path;
}
