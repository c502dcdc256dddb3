/**
 * The client's registry of pending requests: every unsettled acquire by owner and every
 * unsettled release, keep and publish by token, the identifiers the server's replies echo. Requests sharing an
 * identifier (one owner on several keys, one token released twice) chain, so a reply is matched
 * by (identifier, key) without scanning, and two releases of one (key, token) never travel at
 * once (their `R`/`N` would be ambiguous): the later one waits, `blocked`, until the earlier
 * settles.
 */
import type { AcquireResult, BackoffOptions, PublishResult, ReleaseResult } from './options.js';
import type { KeepResult } from './keep.js';
import type { LockMode } from '../modes.js';
import { Table } from '../table.js';

/** Where a request is sent (the connection lane's identity, opaque here). */
export type LaneId = object;

interface PendingBase {
  readonly key: string;
  readonly signal: AbortSignal | undefined;
  /** performance.now() when queued (for connectTimeoutMs). */
  submittedAt: number;
  /** performance.now() when its bytes were handed to the socket; -1 while unsent. */
  sentAt: number;
  settled: boolean;
  lane: LaneId | undefined;
  onAbort: (() => void) | undefined;
}

/** Whether `p` went out on `lane`: a reply answers only a request sent on its own connection. */
export function isSentOn<P extends PendingBase>(p: P | undefined, lane: LaneId): p is P {
  return p !== undefined && p.lane === lane && p.sentAt >= 0;
}

/** A request's state when it is made: queued now, not sent, not settled, on no lane. */
export function unsent(
  signal: AbortSignal | undefined,
  submittedAt: number,
): Pick<PendingBase, 'signal' | 'submittedAt' | 'sentAt' | 'settled' | 'lane' | 'onAbort'> {
  return { signal, submittedAt, sentAt: -1, settled: false, lane: undefined, onAbort: undefined };
}

export interface PendingAcquire extends PendingBase {
  readonly kind: 'acquire';
  readonly owner: string;
  /** The next pending acquire with the same owner (another key). */
  ownerNext: PendingAcquire | undefined;
  /** The caller's budget: server wait of this attempt, and the deadline over all busy retries. */
  waitMs: number;
  readonly deadline: number;
  readonly retryBusy: Required<BackoffOptions> | undefined;
  attempt: number;
  retryTimer: NodeJS.Timeout | undefined;
  /** Its mode: every line sent for it asks for this one. */
  readonly mode: LockMode;
  /** A semaphore request's N (its grant carries a slot); 0 for `x` and `s`. */
  readonly permits: number;
  line: string;
  readonly resolve: (result: AcquireResult) => void;
  readonly reject: (error: unknown) => void;
}

export interface PendingRelease extends PendingBase {
  readonly kind: 'release';
  readonly token: bigint;
  readonly tokenText: string;
  readonly line: string;
  readonly waitMs: 0;
  /** The next pending release with the same token. */
  tokenNext: PendingRelease | undefined;
  /** Waiting for an earlier release of the same (key, token) to settle before it is sent. */
  blocked: boolean;
  readonly resolve: (result: ReleaseResult) => void;
  readonly reject: (error: unknown) => void;
}

/** A keep (`K <key> <token>`). At most one per (key, token) is pending: a second is refused. */
export interface PendingKeep extends PendingBase {
  readonly kind: 'keep';
  readonly token: bigint;
  readonly tokenText: string;
  readonly line: string;
  readonly waitMs: 0;
  /** The next pending keep with the same token (another key). */
  tokenNext: PendingKeep | undefined;
  readonly resolve: (result: KeepResult) => void;
  readonly reject: (error: unknown) => void;
}

/** A publish (`P <key> <token> <value>`), answered `P` or `G`. At most one per (key, token) is
 * pending: a second is refused. It travels on the observe lane, where no keep does, so a `G` there
 * answers a publish. */
export interface PendingPublish extends PendingBase {
  readonly kind: 'publish';
  readonly token: bigint;
  readonly tokenText: string;
  readonly value: string;
  readonly line: string;
  readonly waitMs: 0;
  /** The next pending publish with the same token (another key). */
  tokenNext: PendingPublish | undefined;
  readonly resolve: (result: PublishResult) => void;
  readonly reject: (error: unknown) => void;
}

export type Pending = PendingAcquire | PendingRelease | PendingKeep | PendingPublish;

/** The requests chained by token that a second one of the same (key, token) would make ambiguous. */
type Exclusive = PendingKeep | PendingPublish;

export class PendingRegistry {
  /** Unsettled acquires (queued, sent, or between busy retries) by owner. */
  readonly #acquires = new Table<PendingAcquire>();
  /** Unsettled releases by token, chained in the order they were asked for. */
  readonly #releases = new Table<PendingRelease>();
  /** Unsettled keeps by token. */
  readonly #keeps = new Table<PendingKeep>();
  /** Unsettled publishes by token. */
  readonly #publishes = new Table<PendingPublish>();

  /** Sends a release whose earlier twin settled. */
  readonly #sendUnblocked: (p: PendingRelease) => void;

  constructor(sendUnblocked: (p: PendingRelease) => void) {
    this.#sendUnblocked = sendUnblocked;
  }

  /** Unsettled releases (the client's close() waits for them). */
  get releaseCount(): number {
    return this.#releases.size;
  }

  addAcquire(p: PendingAcquire): void {
    p.ownerNext = this.#acquires.get(p.owner);
    this.#acquires.set(p.owner, p);
  }

  /** Registers a release; marks it `blocked` when one of the same (key, token) is pending. */
  addRelease(p: PendingRelease): void {
    let last: PendingRelease | undefined;
    for (let q = this.#releases.get(p.tokenText); q !== undefined; q = q.tokenNext) {
      if (q.key === p.key) p.blocked = true;
      last = q;
    }
    if (last === undefined) this.#releases.set(p.tokenText, p);
    else last.tokenNext = p;
  }

  /** Registers a keep or a publish; false (nothing registered) when one of its kind and the same
   * (key, token) is pending. */
  addExclusive(p: Exclusive): boolean {
    const table = this.#tableOf(p);
    if (findIn(table, p.tokenText, p.key) !== undefined) return false;
    p.tokenNext = table.get(p.tokenText);
    table.set(p.tokenText, p);
    return true;
  }

  /** The pending keep by (token, key), if any. */
  findKeep(token: string, key: string): PendingKeep | undefined {
    return findIn(this.#keeps, token, key);
  }

  /** The pending publish by (token, key), if any. */
  findPublish(token: string, key: string): PendingPublish | undefined {
    return findIn(this.#publishes, token, key);
  }

  /** A pending acquire by (owner, key), if any. */
  findAcquire(owner: string, key: string): PendingAcquire | undefined {
    for (let p = this.#acquires.get(owner); p !== undefined; p = p.ownerNext) if (p.key === key) return p;
    return undefined;
  }

  /** A pending release by (token, key) that may have been sent (not blocked), if any. */
  findRelease(token: string, key: string): PendingRelease | undefined {
    for (let p = this.#releases.get(token); p !== undefined; p = p.tokenNext) if (p.key === key && !p.blocked) return p;
    return undefined;
  }

  /** Takes a settled request out; a release's blocked twin is sent now. */
  remove(p: Pending): void {
    if (p.kind === 'acquire') this.#removeAcquire(p);
    else if (p.kind === 'release') this.#removeRelease(p);
    else unlink(this.#tableOf(p), p);
  }

  #tableOf(p: Exclusive): Table<Exclusive> {
    return p.kind === 'keep' ? this.#keeps : this.#publishes;
  }

  /** Requests sent on `lane` and not settled (rare paths: teardown, the watchdog). */
  sentOn(lane: LaneId): Pending[] {
    const out: Pending[] = [];
    for (const head of this.#acquires.values()) {
      for (let p: PendingAcquire | undefined = head; p !== undefined; p = p.ownerNext)
        if (isSentOn(p, lane) && !p.settled) out.push(p);
    }
    for (const head of this.#releases.values()) {
      for (let p: PendingRelease | undefined = head; p !== undefined; p = p.tokenNext)
        if (isSentOn(p, lane) && !p.settled) out.push(p);
    }
    for (const table of [this.#keeps, this.#publishes] as Table<Exclusive>[]) {
      for (const head of table.values()) {
        for (let p: Exclusive | undefined = head; p !== undefined; p = p.tokenNext)
          if (isSentOn(p, lane) && !p.settled) out.push(p);
      }
    }
    return out;
  }

  /** Requests pending off every lane: acquires between busy retries, releases blocked behind a
   * twin. None of them is pending on the server. */
  offLane(): Pending[] {
    const out: Pending[] = [];
    for (const head of this.#acquires.values()) {
      for (let p: PendingAcquire | undefined = head; p !== undefined; p = p.ownerNext)
        if (p.lane === undefined && !p.settled) out.push(p);
    }
    for (const head of this.#releases.values()) {
      for (let p: PendingRelease | undefined = head; p !== undefined; p = p.tokenNext)
        if (p.blocked && !p.settled) out.push(p);
    }
    return out;
  }

  #removeAcquire(p: PendingAcquire): void {
    const head = this.#acquires.get(p.owner);
    if (head === p) {
      if (p.ownerNext === undefined) this.#acquires.delete(p.owner);
      else this.#acquires.set(p.owner, p.ownerNext);
    } else {
      let q = head;
      while (q !== undefined && q.ownerNext !== p) q = q.ownerNext;
      if (q !== undefined) q.ownerNext = p.ownerNext;
    }
    p.ownerNext = undefined;
  }

  #removeRelease(p: PendingRelease): void {
    const head = this.#releases.get(p.tokenText);
    if (head === p) {
      if (p.tokenNext === undefined) this.#releases.delete(p.tokenText);
      else this.#releases.set(p.tokenText, p.tokenNext);
    } else {
      let q = head;
      while (q !== undefined && q.tokenNext !== p) q = q.tokenNext;
      if (q !== undefined) q.tokenNext = p.tokenNext;
    }
    p.tokenNext = undefined;
    if (p.blocked) return; // it never went out: nothing waits on it
    // The next release of the same (key, token) may go now.
    for (let q = this.#releases.get(p.tokenText); q !== undefined; q = q.tokenNext) {
      if (q.key === p.key && q.blocked) {
        q.blocked = false;
        this.#sendUnblocked(q);
        return;
      }
    }
  }
}

function findIn<T extends Exclusive>(table: Table<T>, token: string, key: string): T | undefined {
  for (let p = table.get(token); p !== undefined; p = p.tokenNext as T | undefined) if (p.key === key) return p;
  return undefined;
}

/** Takes `p` out of its token's chain. */
function unlink(table: Table<Exclusive>, p: Exclusive): void {
  const head = table.get(p.tokenText);
  if (head === p) {
    if (p.tokenNext === undefined) table.delete(p.tokenText);
    else table.set(p.tokenText, p.tokenNext);
  } else {
    let q = head;
    while (q !== undefined && q.tokenNext !== p) q = q.tokenNext;
    if (q !== undefined) q.tokenNext = p.tokenNext;
  }
  p.tokenNext = undefined;
}
