/**
 * What the server's parts share: its checked options, the state it serves from, its connections,
 * and the parts themselves (each in a file of its own, one job each). Not exported from the
 * package: `TicketServer` (server.ts) is the public face.
 */
import type { TicketState } from '../state.js';
import type { TokenStore } from '../token-store.js';
import type { Connection } from './connection.js';
import type { Connections } from './connections.js';
import type { Delivery } from './delivery.js';
import type { ServerConfig } from './options.js';
import type { Outbox } from './replies.js';
import type { Timers } from './timers.js';

export class ServerCore {
  /** The state requests are applied to; undefined in cluster mode while this node does not lead. */
  state: TicketState | undefined;
  store: TokenStore | undefined;
  /** close() was called. */
  closing = false;
  readonly connections = new Map<number, Connection>();
  // The parts, set once by the server's constructor.
  outbox!: Outbox;
  delivery!: Delivery;
  conns!: Connections;
  timers!: Timers;

  constructor(
    /** The `server` of every diagnostics_channel message. */
    readonly owner: object,
    readonly config: ServerConfig,
    /** The state file could not be written: no token may leave (closes everything, reports). */
    readonly fatal: (error: unknown) => void,
  ) {}
}
