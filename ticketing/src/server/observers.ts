/**
 * Observers (docs/ticketing-election.md): which connections observe which keys, and the `V` lines
 * they are sent. Fed by the state's `changed` effects (through the command applier); the state
 * only knows that a key is watched.
 *
 * Each observer gets the key's state at once, then every change in rev order while it keeps up.
 * One whose unwritten output passes the high-water mark is sent nothing more until it drains, and
 * then only the latest state of each key that changed meanwhile: a slow observer costs at most the
 * high-water mark plus one line per key it observes, however fast the keys change, and is never
 * left on a state that is no longer true. One that does not drain within the write timeout is
 * cut off, like any connection whose replies back up.
 *
 * In cluster mode a change's `V` is held by the gate until the batch that writes it commits, then
 * handed back here (`deliverHeld`): an observer sees only committed states.
 */
import { formatUnobserved, formatView, viewHead, type View } from '../election-wire.js';
import type { ObservedState } from '../state-types.js';
import type { CommandApplier } from './applier.js';
import type { ServerGate } from './cluster-host.js';
import type { Connection, Observation } from './connection.js';
import type { Outbox } from './replies.js';

/** The gate's session for a change's `V`, fanned out to the key's observers once committed. */
export const OBSERVED_CHANGE = -2;

export interface ObservationLimits {
  /** Observations open at once, all connections together. */
  readonly maxObservations: number;
  /** Observations one connection may have open. */
  readonly maxObservationsPerConnection: number;
}

export class Observers {
  readonly #byKey = new Map<string, Set<Connection>>();
  #total = 0;

  constructor(
    private readonly limits: ObservationLimits,
    /** Where `watch`/`unwatch` go, and the state read for an observer's first `V`. */
    private readonly applier: Pick<CommandApplier, 'apply' | 'state'>,
    private readonly outbox: Pick<Outbox, 'send' | 'flush'>,
    /** Cluster mode: holds each `V` until its commit. */
    private readonly gate: Pick<ServerGate, 'hold'> | undefined,
    /** Replies buffered for one connection beyond which it is behind. */
    private readonly highWater: number,
  ) {}

  /** Observations open, all connections together. */
  get count(): number {
    return this.#total;
  }

  /** `O <key>`: the key's state now, then its changes. Observing a key again re-sends its state. */
  observe(conn: Connection, key: string): void {
    const state = this.applier.state;
    if (state === undefined) return;
    const mine = (conn.observing ??= new Map<string, Observation>());
    let observation = mine.get(key);
    if (observation === undefined) {
      if (this.#total >= this.limits.maxObservations || mine.size >= this.limits.maxObservationsPerConnection) {
        this.outbox.send(conn, formatUnobserved(key, true));
        return;
      }
      observation = { lastRev: -1n, pending: undefined };
      mine.set(key, observation);
      this.#total++;
      let observers = this.#byKey.get(key);
      if (observers === undefined) {
        this.#byKey.set(key, (observers = new Set()));
        this.applier.apply({ type: 'watch', key });
      }
      observers.add(conn);
    } else {
      observation.lastRev = -1n; // asked again: sent again
    }
    const now = state.observed(key);
    const line = formatView(key, now.rev, viewOf(now));
    // Cluster mode: after every change before it is committed (held replies leave in order).
    if (this.gate !== undefined) this.gate.hold(conn.id, line, undefined);
    else this.#send(conn, observation, now.rev, line);
  }

  /** `U <key>`: no `V` for the key follows the reply. */
  unobserve(conn: Connection, key: string): void {
    this.#forget(conn, key);
    this.outbox.send(conn, formatUnobserved(key));
  }

  /** The connection is gone: its observations end. */
  drop(conn: Connection): void {
    const mine = conn.observing;
    if (mine === undefined) return;
    for (const key of [...mine.keys()]) this.#forget(conn, key);
    conn.observing = undefined;
  }

  /** The state is replaced (cluster mode: a new term, or none): the connections that observed
   * keys there are being closed, and the new state watches nothing. */
  reset(): void {
    for (const observers of this.#byKey.values()) for (const conn of observers) conn.observing = undefined;
    this.#byKey.clear();
    this.#total = 0;
  }

  /** A watched key changed (the state's `changed` effect). */
  changed(key: string, state: ObservedState): void {
    const line = formatView(key, state.rev, viewOf(state));
    if (this.gate !== undefined) this.gate.hold(OBSERVED_CHANGE, line, undefined);
    else this.#fanOut(key, state.rev, line);
  }

  /** Cluster mode: a change's `V`, committed. */
  deliverHeld(line: string): void {
    const { key, rev } = viewHead(line);
    this.#fanOut(key, rev, line);
  }

  #fanOut(key: string, rev: bigint, line: string): void {
    const observers = this.#byKey.get(key);
    if (observers === undefined) return;
    for (const conn of observers) this.#send(conn, conn.observing!.get(key)!, rev, line);
  }

  #send(conn: Connection, observation: Observation, rev: bigint, line: string): void {
    if (conn.closing || rev <= observation.lastRev) return;
    observation.lastRev = rev;
    const { socket } = conn;
    // Past the mark (above the socket's own), so a 'drain' will come.
    if (conn.behind || (socket.writableLength > this.highWater && socket.writableNeedDrain)) {
      observation.pending = line;
      if (!conn.behind) {
        conn.behind = true;
        socket.once('drain', () => this.#caughtUp(conn));
      }
      return;
    }
    this.outbox.send(conn, line);
  }

  /** A connection that was behind drained: the latest state of each key that changed meanwhile. */
  #caughtUp(conn: Connection): void {
    conn.behind = false;
    const mine = conn.observing;
    if (mine === undefined || conn.closing) return;
    for (const observation of mine.values()) {
      if (observation.pending !== undefined) this.outbox.send(conn, observation.pending);
      observation.pending = undefined;
    }
    this.outbox.flush();
  }

  #forget(conn: Connection, key: string): void {
    if (conn.observing?.delete(key) !== true) return;
    this.#total--;
    const observers = this.#byKey.get(key)!;
    observers.delete(conn);
    if (observers.size === 0) {
      this.#byKey.delete(key);
      this.applier.apply({ type: 'unwatch', key });
    }
  }
}

/** The wire's view of an observed state: one exclusive holder, a count, or vacant. */
function viewOf(state: ObservedState): View {
  const { exclusive } = state;
  if (exclusive !== undefined) {
    return { holders: 1, token: String(exclusive.token), owner: exclusive.owner, value: exclusive.value };
  }
  return state.count === 0 ? { holders: 0 } : { holders: 'many', count: state.count };
}
