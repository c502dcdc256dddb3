/**
 * Prometheus metrics of one server (prom-client), in a Registry of their own so that two servers in
 * one process do not share counters. Fed only by the diagnostics_channel events of events.ts (the
 * state machine's effects, the cluster node's role, leader and commits) and, at scrape time, by the
 * server's and the node's read-only queries: nothing is called from the request path.
 *
 * The names are part of the interface (docs/ticketing-production.md "Metrics").
 */
import diagnostics from 'node:diagnostics_channel';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { channels } from '../events.js';
import type { Effect } from '../state-types.js';

/** What the metrics read from the server at scrape time. */
export interface MetricsServer {
  readonly leaseMs: number;
  stats(): {
    readonly connections: number;
    readonly keys: number;
    readonly waiters: number;
    readonly observations: number;
  };
}

/** What the metrics read from a cluster node at scrape time. */
export interface MetricsNode {
  readonly role: string;
}

export interface TicketMetricsOptions {
  /** The server observed: only events whose `server` is this one count. */
  readonly server: MetricsServer;
  /** Cluster mode: the server's gate (only its events count). Absent: single mode. */
  readonly node?: MetricsNode | undefined;
}

/** From a queued request's arrival to its grant: a lock wait is anything from 0 to minutes. */
const WAIT_BUCKETS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];
/** One guarded etcd txn on loopback or a LAN: milliseconds, more when etcd is electing. */
const COMMIT_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];
const WINDOW_BUCKETS = [1, 2, 4, 8, 16, 32, 64];

type Message = { readonly server?: unknown; readonly node?: unknown };

export class TicketMetrics {
  readonly registry = new Registry();
  readonly #server: MetricsServer;
  readonly #node: MetricsNode | undefined;
  readonly #requests: Counter<'op' | 'result'>;
  readonly #wait: Histogram;
  readonly #grants: Counter<'mode'>;
  readonly #expirations: Counter;
  readonly #leaseRestarts: Counter;
  readonly #leaderChanges: Counter;
  readonly #commit: Histogram;
  readonly #commitsInFlight: Histogram;
  /** The leader this node last reported (to count changes, not repeats). */
  #lastLeader: unknown;
  readonly #subscriptions: Array<[diagnostics.Channel, (message: unknown) => void]> = [];

  constructor(options: TicketMetricsOptions) {
    this.#server = options.server;
    this.#node = options.node;
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    // Gauges named *_total fail `promtool check metrics`; each is the sum of the by-type gauge of
    // its name without the suffix (nodejs_active_handles …), which stays.
    for (const kind of ['handles', 'requests', 'resources'])
      this.registry.removeSingleMetric(`nodejs_active_${kind}_total`);
    this.#requests = new Counter({
      name: 'ticketing_requests_total',
      help: 'Requests answered, by verb (op) and outcome (result).',
      labelNames: ['op', 'result'] as const,
      registers,
    });
    // Every pair exists from the start, so that a rate over it is defined before the first one.
    for (const result of ['acquired', 'timeout', 'busy', 'conflict']) this.#requests.inc({ op: 'acquire', result }, 0);
    this.#grants = new Counter({
      name: 'ticketing_grants_total',
      help: 'Grants, by mode: x (exclusive), s (shared), permit (one of a semaphore).',
      labelNames: ['mode'] as const,
      registers,
    });
    for (const mode of ['x', 's', 'permit']) this.#grants.inc({ mode }, 0);
    for (const result of ['released', 'not_held']) this.#requests.inc({ op: 'release', result }, 0);
    for (const result of ['kept', 'gone']) this.#requests.inc({ op: 'keep', result }, 0);
    this.#wait = new Histogram({
      name: 'ticketing_acquire_wait_seconds',
      help: 'Time from an acquire request arriving to its grant (0 for a key granted at once).',
      buckets: WAIT_BUCKETS,
      registers,
    });
    this.#expirations = new Counter({
      name: 'ticketing_expirations_total',
      help: 'Grants that ended by expiry: the holder never released (it died or hung).',
      registers,
    });
    this.#leaseRestarts = new Counter({
      name: 'ticketing_lease_restarts_total',
      help: "Cluster mode: grant leases restarted at their commit (a grant's lease counts from when its reply can leave).",
      registers,
    });
    const gauge = (name: string, help: string, read: () => number): void => {
      new Gauge({
        name,
        help,
        registers,
        collect() {
          this.set(read());
        },
      });
    };
    gauge(
      'ticketing_keys',
      'Keys registered now (held, or expired and not yet swept).',
      () => options.server.stats().keys,
    );
    gauge('ticketing_waiters', 'Requests queued now, all keys together.', () => options.server.stats().waiters);
    gauge('ticketing_connections', 'Client connections open now.', () => options.server.stats().connections);
    gauge('ticketing_observations', 'Keys observed (O) now, all connections together.', () => {
      return options.server.stats().observations;
    });
    gauge('ticketing_is_leader', '1 on the serving leader and in single mode, else 0.', () =>
      this.#node === undefined || this.#node.role === 'leader' ? 1 : 0,
    );
    this.#leaderChanges = new Counter({
      name: 'ticketing_leader_changes_total',
      help: 'Cluster mode: times this node saw a new leader in etcd.',
      registers,
    });
    this.#commit = new Histogram({
      name: 'ticketing_etcd_commit_seconds',
      help: 'Cluster mode: time of one group commit to etcd (its guarded txns, retries included).',
      buckets: COMMIT_BUCKETS,
      registers,
    });
    this.#commitsInFlight = new Histogram({
      name: 'ticketing_etcd_commits_in_flight',
      help: 'Cluster mode: group commits in flight when one was sent, itself included (at most --commit-window).',
      buckets: WINDOW_BUCKETS,
      registers,
    });
    this.#subscribe(channels.serverEffect, (message) => this.#onEffect((message as { effect: Effect }).effect));
    this.#subscribe(channels.clusterLeader, (message) => {
      const { leader } = message as { leader: string | undefined };
      if (leader !== undefined && leader !== this.#lastLeader) this.#leaderChanges.inc();
      this.#lastLeader = leader;
    });
    this.#subscribe(channels.clusterCommit, (message) => {
      const { seconds, inFlight } = message as { seconds: number; inFlight: number };
      this.#commit.observe(seconds);
      this.#commitsInFlight.observe(inFlight);
    });
  }

  /** The text format of every metric, as `GET /metrics` serves it. */
  metrics(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  /** Stops counting (unsubscribes). */
  close(): void {
    for (const [channel, listener] of this.#subscriptions) channel.unsubscribe(listener);
    this.#subscriptions.length = 0;
  }

  /** Subscribes to `channel`, for the messages of this server or node only. */
  #subscribe(channel: diagnostics.Channel, listener: (message: unknown) => void): void {
    const mine = (message: unknown): void => {
      const { server, node } = message as Message;
      if (server === this.#server || (node !== undefined && node === this.#node)) listener(message);
    };
    channel.subscribe(mine);
    this.#subscriptions.push([channel, mine]);
  }

  #onEffect(effect: Effect): void {
    switch (effect.type) {
      case 'granted': {
        this.#requests.inc({ op: 'acquire', result: 'acquired' });
        this.#grants.inc({ mode: typeof effect.mode === 'number' ? 'permit' : effect.mode });
        // Granted at expiresAt - leaseMs; requested at its arrival (or queueing).
        const waitedMs = effect.expiresAt - this.#server.leaseMs - effect.requestedAt;
        this.#wait.observe(Math.max(0, waitedMs) / 1000);
        return;
      }
      case 'timed-out':
        this.#requests.inc({ op: 'acquire', result: 'timeout' });
        return;
      case 'busy':
        this.#requests.inc({ op: 'acquire', result: 'busy' });
        return;
      case 'conflict':
        this.#requests.inc({ op: 'acquire', result: 'conflict' });
        return;
      case 'released':
        // The server's own releases (of a grant nobody could receive) have negative sessions.
        if (effect.session >= 0) this.#requests.inc({ op: 'release', result: 'released' });
        return;
      case 'not-released':
        this.#requests.inc({ op: 'release', result: 'not_held' });
        return;
      case 'kept':
        this.#requests.inc({ op: 'keep', result: 'kept' });
        return;
      case 'gone':
        this.#requests.inc({ op: 'keep', result: 'gone' });
        return;
      case 'expired':
        this.#expirations.inc();
        return;
      case 'lease-restarted':
        this.#leaseRestarts.inc();
        return;
      default:
        return;
    }
  }
}
