/**
 * The seam between the server and cluster mode (cluster/node.ts): the gate the server consults,
 * and the host through which the gate drives the server (gate-host.ts builds it).
 */
import type { Command, Effect } from '../state-types.js';
import type { TicketState } from '../state.js';

/**
 * Without a gate the server owns its state and answers at once (single mode). With one, the gate
 * supplies the state (only while this node leads and has rebuilt the table) and every reply passes
 * through `hold` until the gate's commit.
 */
export interface ServerGate {
  /** Called once by `listen()`, before the first connection. */
  attach(host: GateHost): void;
  /** Before a request is processed: `undefined` to process it here, else the one line (`M …` or
   * `E …`) to answer with before closing the connection. */
  refusal(): string | undefined;
  /** Every effect of every command applied to the state. */
  effect(effect: Effect): void;
  /** A reply for a session; `grant` is set for an `A`. The gate hands it back through
   * `GateHost.deliver` once the batch it belongs to is committed, or never. */
  hold(session: number, line: string, grant: { readonly key: string; readonly token: bigint } | undefined): void;
  /** First step of `close()`: answer no more requests, finish or drop what is pending, step down. */
  close(): Promise<void>;
}

/** What a gate may do to the server. */
export interface GateHost {
  /** The server's clock (epoch ms). */
  now(): number;
  /** Serve from this state from now on, or (undefined) from none: every connection that sent a
   * request is answered `E not_active <detail>` and closed. */
  setState(state: TicketState | undefined, detail?: string): void;
  /** Writes committed replies, in order. A grant whose connection is gone is released. */
  deliver(replies: ReadonlyArray<HeldReply>): void;
  /** Applies a command of the gate's own (a lease restart) to the state served from, as requests
   * are applied: its effects are published and reach `ServerGate.effect`. */
  apply(command: Command): void;
  /** Sends an unsolicited line (`L …`) to every open connection. */
  broadcast(line: string): void;
  /** The gate cannot go on (etcd refused this node): close the server and emit `error`. */
  fail(error: Error): void;
}

export interface HeldReply {
  readonly session: number;
  readonly line: string;
  readonly grant: { readonly key: string; readonly token: bigint } | undefined;
}
