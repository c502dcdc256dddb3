/**
 * What the console and `GET /v1/node` say about the node: its role, who leads, whether etcd
 * answers, its connections and keys, and the requests it answered per second over the last
 * minutes. Fed by the diagnostics_channel events of events.ts (effects, leader, etcd) and the
 * server's read-only queries (`stats`, `readiness`); nothing is called from the request path.
 */
import { channels } from '../events.js';
import type { Effect } from '../state-types.js';
import { Subscriptions } from './subscriptions.js';

/** What the status reads from the server. */
export interface StatusServer {
  readonly leaseMs: number;
  stats(): { readonly connections: number; readonly keys: number; readonly waiters: number };
  readiness(): { readonly ready: boolean; readonly reason?: string | undefined; readonly leader?: string | undefined };
}

/** What it reads from a cluster node (cluster/node.ts). */
export interface StatusNode {
  /** `leader`, `catching-up` or `follower`. */
  readonly role: string;
  /** The address clients reach this node at. */
  readonly advertise: string;
}

type NodeRole = 'single' | 'leader' | 'catching-up' | 'follower';

export interface NodeView {
  readonly role: NodeRole;
  /** Would a request sent now be served (`reason`: why not)? */
  readonly ready: boolean;
  readonly reason?: string;
  /** Cluster mode: this node's advertise address. */
  readonly self?: string;
  /** Cluster mode: the leader's advertise address as this node last saw it. */
  readonly leader?: string;
  /** Cluster mode, not leading: where the leader's console is (see `leaderConsole`). */
  readonly leaderConsole?: string;
  /** Cluster mode: whether etcd confirms this node's lease (`unknown` until it first answers). */
  readonly etcd?: 'reachable' | 'unreachable' | 'unknown';
  readonly connections: number;
  /** Keys registered (held, or expired and not yet swept) and requests queued. */
  readonly keys: number;
  readonly waiters: number;
  /** The lease of every grant, ms. */
  readonly leaseMs: number;
  /** Requests answered in each of the last `HISTORY_SECONDS` whole seconds, oldest first. */
  readonly requestsPerSecond: readonly number[];
}

export interface NodeStatusOptions {
  readonly server: StatusServer;
  readonly node?: StatusNode | undefined;
  /** The URL of the console of the node at `advertise` (the leader). */
  readonly consoleOf: (advertise: string) => string | undefined;
  /** Called when the role, the leader or etcd's reachability changed. */
  readonly onChange?: () => void;
}

const HISTORY_SECONDS = 300;

/** Effects that answer a request (as `ticketing_requests_total` counts them). */
function answers(effect: Effect): boolean {
  switch (effect.type) {
    case 'granted':
    case 'timed-out':
    case 'busy':
    case 'not-released':
    case 'kept':
    case 'gone':
      return true;
    case 'released':
      return effect.session >= 0; // negative: the server's own release of an undeliverable grant
    default:
      return false;
  }
}

export class NodeStatus {
  readonly #server: StatusServer;
  readonly #node: StatusNode | undefined;
  readonly #consoleOf: (advertise: string) => string | undefined;
  readonly #subscriptions: Subscriptions;
  readonly #rate = new RequestRate(HISTORY_SECONDS);
  #leader: string | undefined;
  #etcd: boolean | undefined;

  constructor(options: NodeStatusOptions) {
    this.#server = options.server;
    this.#node = options.node;
    this.#consoleOf = options.consoleOf;
    const changed = options.onChange ?? ((): void => {});
    const subscriptions = (this.#subscriptions = new Subscriptions(options.server, options.node));
    subscriptions.on<{ effect: Effect }>(channels.serverEffect, ({ effect }) => {
      if (answers(effect)) this.#rate.count(performance.now());
    });
    subscriptions.on<{ leader: string | undefined }>(channels.clusterLeader, ({ leader }) => {
      this.#leader = leader;
      changed();
    });
    subscriptions.on<{ reachable: boolean }>(channels.clusterEtcd, ({ reachable }) => {
      this.#etcd = reachable;
      changed();
    });
    subscriptions.on(channels.clusterRole, changed);
  }

  view(): NodeView {
    const server = this.#server;
    const { connections, keys, waiters } = server.stats();
    const { ready, reason, leader: redirect } = server.readiness();
    const common = {
      ready,
      ...(reason === undefined ? {} : { reason }),
      connections,
      keys,
      waiters,
      leaseMs: server.leaseMs,
      requestsPerSecond: this.#rate.history(performance.now()),
    };
    const node = this.#node;
    if (node === undefined) return { role: 'single', ...common };
    const role = node.role === 'leader' || node.role === 'catching-up' ? node.role : 'follower';
    const leader = role === 'leader' ? node.advertise : (this.#leader ?? redirect);
    const leaderConsole = leader === undefined || leader === node.advertise ? undefined : this.#consoleOf(leader);
    return {
      role,
      ...common,
      self: node.advertise,
      ...(leader === undefined ? {} : { leader }),
      ...(leaderConsole === undefined ? {} : { leaderConsole }),
      etcd: this.#etcd === undefined ? 'unknown' : this.#etcd ? 'reachable' : 'unreachable',
    };
  }

  close(): void {
    this.#subscriptions.close();
  }
}

/** Counts per whole second (monotonic clock) in a ring of the last `seconds`. */
class RequestRate {
  readonly #counts: Uint32Array;
  /** The second the newest bucket counts. */
  #second = 0;

  constructor(seconds: number) {
    this.#counts = new Uint32Array(seconds + 1); // + the second in progress
  }

  count(nowMs: number): void {
    this.#advance(Math.floor(nowMs / 1000));
    this.#counts[this.#second % this.#counts.length]!++;
  }

  /** The last whole seconds, oldest first (the one in progress left out). */
  history(nowMs: number): number[] {
    this.#advance(Math.floor(nowMs / 1000));
    const size = this.#counts.length;
    const out: number[] = [];
    for (let s = this.#second - size + 1; s < this.#second; s++) out.push(this.#counts[((s % size) + size) % size]!);
    return out;
  }

  #advance(second: number): void {
    if (second <= this.#second) return;
    const size = this.#counts.length;
    // Buckets of the seconds that passed without a request are zeroed (all of them after a long gap).
    for (let s = Math.max(this.#second + 1, second - size + 1); s <= second; s++) this.#counts[s % size] = 0;
    this.#second = second;
  }
}
