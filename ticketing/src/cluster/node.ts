/**
 * Cluster mode: the gate (server/cluster-host.ts `ServerGate`) that makes a TicketServer one node
 * of a lock space replicated in etcd. It answers what the server asks from the node's leadership
 * (leadership.ts) and its lease confidence (lease-confidence.ts), and passes the leader's effects
 * and replies to the term's commit loop (commit-loop.ts).
 *
 * Its invariant: a request is processed only on the leader of a term that is serving, while its
 * lease is confirmed; any other node answers it with the one line docs/ticketing-cluster.md,
 * "What a node answers", gives (and a leader whose lease is in doubt steps down first).
 */
import { formatError, formatMoved } from '../protocol.js';
import type { GateHost, ServerGate } from '../server/cluster-host.js';
import type { Effect } from '../state-types.js';
import { checkEtcdClientOptions } from './etcd.js';
import { LeaseConfidence } from './lease-confidence.js';
import { Leadership, type Role } from './leadership.js';
import { resolveClusterOptions, type ClusterNodeOptions } from './options.js';
import { KeyLayout } from './store.js';

export class ClusterNode implements ServerGate {
  readonly advertise: string;
  readonly prefix: string;
  readonly leaderTtlMs: number;
  readonly #confidence: LeaseConfidence;
  readonly #leadership: Leadership;

  /** Checks every option up front (a TypeError or RangeError naming it; see options.ts). */
  constructor(options: ClusterNodeOptions) {
    const config = resolveClusterOptions(options);
    this.advertise = config.advertise;
    this.prefix = config.prefix;
    this.leaderTtlMs = config.leaderTtlMs;
    checkEtcdClientOptions({ hosts: config.etcd, tls: config.etcdTls, user: config.etcdUser });
    this.#confidence = new LeaseConfidence(this.leaderTtlMs);
    this.#leadership = new Leadership({
      config,
      layout: new KeyLayout(this.prefix),
      confidence: this.#confidence,
      node: this,
    });
  }

  /** `leader`, `catching-up` or `follower`. */
  get role(): Role {
    return this.#leadership.role;
  }

  attach(host: GateHost): void {
    this.#leadership.start(host);
  }

  refusal(): string | undefined {
    const leadership = this.#leadership;
    if (leadership.closing) return formatError('not_active', 'shutting down');
    if (leadership.accessError !== undefined) return formatError('not_active', 'etcd refused this node');
    if (!this.#confidence.confirmed) {
      leadership.stepDown('lease not confirmed');
      return formatError('not_active', this.#confidence.everConfirmed ? 'etcd unreachable' : 'starting');
    }
    if (leadership.role === 'leader') return undefined;
    if (leadership.role === 'catching-up') return formatError('not_active', 'catching up');
    const leader = leadership.leader;
    // Our own address in etcd while we are not leading: a key left by this address's previous
    // process, about to expire. Sending clients back here would loop them.
    if (leader === this.advertise) return formatError('not_active', 'catching up');
    return leader === undefined ? formatError('no_leader') : formatMoved(leader);
  }

  effect(effect: Effect): void {
    this.#leadership.commits?.effect(effect);
  }

  hold(session: number, line: string, grant: { readonly key: string; readonly token: bigint } | undefined): void {
    this.#leadership.commits?.hold({ session, line, grant });
  }

  close(): Promise<void> {
    return this.#leadership.close();
  }
}
