/**
 * Cluster mode: the gate (server/cluster-host.ts `ServerGate`) that makes a TicketServer one node
 * of a lock space replicated in etcd, and the node's leadership: it keeps an etcd lease, watches
 * the leader key, campaigns when it is absent, takes over, and steps down. While it leads, the
 * term's commit loop (commit-loop.ts) commits every state change before the reply about it.
 *
 * Its invariant: this node serves only while it holds the leader key of the current term and its
 * lease is confirmed (lease-confidence.ts); anything else ends the term at once (held replies
 * dropped, state dropped, every connection that sent anything answered `E not_active` and
 * closed). The design: docs/ticketing-cluster.md, "How it works".
 */
import type { Etcd3, IKeyValue, Lease, Watcher } from 'etcd3';
import { channels, publish } from '../events.js';
import { formatError, formatLeader, formatMoved } from '../protocol.js';
import type { GateHost, ServerGate } from '../server/cluster-host.js';
import { TicketState, type Effect } from '../state.js';
import { CommitLoop } from './commit-loop.js';
import { asAccessError, checkEtcdAccess, checkEtcdClientOptions, createEtcdClient } from './etcd.js';
import type { EtcdAccessError } from './errors.js';
import { LeaseConfidence } from './lease-confidence.js';
import { resolveClusterOptions, type ClusterConfig, type ClusterNodeOptions } from './options.js';
import { KeyLayout, decodeSnapshot } from './store.js';

type Role = 'follower' | 'catching-up' | 'leader';

const monotonic = (): number => performance.now();
const noop = (): void => {};

export class ClusterNode implements ServerGate {
  readonly advertise: string;
  readonly prefix: string;
  readonly leaderTtlMs: number;
  readonly #options: ClusterConfig;
  readonly #layout: KeyLayout;
  readonly #confidence: LeaseConfidence;
  #host: GateHost | undefined;
  #client: Etcd3 | undefined;
  #lease: Lease | undefined;
  #leaseId: string | undefined;
  #watcher: Watcher | undefined;
  #monitor: NodeJS.Timeout | undefined;

  #role: Role = 'follower';
  #closing = false;
  #closed = false;
  /** Bumped at every change of role: async work started in an older term is ignored. */
  #term = 0;
  /** The create revision of our leader key while leading (or catching up). */
  #leaderRevision: string | undefined;
  /** The leader's advertise address as last seen in etcd. */
  #leader: string | undefined;
  #campaigning = false;
  #lastCampaign = -Infinity;
  /** Set once etcd has refused this node for good (see #refused). */
  #accessError: EtcdAccessError | undefined;
  #startedAt = monotonic();
  /** As last published on `clusterEtcd` (undefined: not yet). */
  #etcdReachable: boolean | undefined;

  /** The term's commit loop (undefined while not leading). */
  #commits: CommitLoop | undefined;

  /** Checks every option up front (a TypeError or RangeError naming it; see options.ts). */
  constructor(options: ClusterNodeOptions) {
    this.#options = resolveClusterOptions(options);
    this.advertise = options.advertise;
    this.prefix = this.#options.prefix;
    this.leaderTtlMs = this.#options.leaderTtlMs;
    checkEtcdClientOptions({ hosts: options.etcd, tls: options.etcdTls, user: options.etcdUser });
    this.#layout = new KeyLayout(this.prefix);
    this.#confidence = new LeaseConfidence(this.leaderTtlMs);
  }

  /** `leader`, `catching-up` or `follower`. */
  get role(): Role {
    return this.#role;
  }

  // ---------------------------------------------------------------------------------------------
  // ServerGate

  attach(host: GateHost): void {
    this.#host = host;
    void this.#start();
  }

  refusal(): string | undefined {
    if (this.#closing) return formatError('not_active', 'shutting down');
    if (this.#accessError !== undefined) return formatError('not_active', 'etcd refused this node');
    if (!this.#confidence.confirmed) {
      this.#stepDown('lease not confirmed');
      return formatError('not_active', this.#confidence.everConfirmed ? 'etcd unreachable' : 'starting');
    }
    if (this.#role === 'leader') return undefined;
    if (this.#role === 'catching-up') return formatError('not_active', 'catching up');
    const leader = this.#leader;
    // Our own address in etcd while we are not leading: a key left by this address's previous
    // process, about to expire. Sending clients back here would loop them.
    if (leader === this.advertise) return formatError('not_active', 'catching up');
    return leader === undefined ? formatError('no_leader') : formatMoved(leader);
  }

  effect(effect: Effect): void {
    this.#commits?.effect(effect);
  }

  hold(session: number, line: string, grant: { readonly key: string; readonly token: bigint } | undefined): void {
    this.#commits?.hold({ session, line, grant });
  }

  async close(): Promise<void> {
    if (this.#closing) return;
    this.#closing = true;
    // Let the server queue its last answers (drain answers waiters T), then commit them.
    await new Promise<void>((resolve) => setImmediate(resolve));
    await this.#commits?.drain(2 * this.#options.callTimeoutMs);
    const wasLeader = this.#role !== 'follower';
    this.#endTerm('shutting down');
    this.#closed = true;
    clearInterval(this.#monitor);
    // Revoking the lease deletes the leader key with it: a new leader need not wait out the TTL.
    if (wasLeader && this.#lease !== undefined) {
      await withTimeout(this.#lease.revoke(), this.#options.callTimeoutMs).catch(noop);
    } else {
      this.#lease?.release();
      if (this.#leaseId !== undefined) {
        await withTimeout(
          this.#client!.leaseClient.leaseRevoke({ ID: this.#leaseId }),
          this.#options.callTimeoutMs,
        ).catch(noop);
      }
    }
    await this.#watcher?.cancel().catch(noop);
    this.#client?.close();
  }

  // ---------------------------------------------------------------------------------------------
  // Lease and leadership

  async #start(): Promise<void> {
    const clientOptions = {
      hosts: this.#options.etcd,
      callTimeoutMs: this.#options.callTimeoutMs,
      hostCooldownMs: Math.min(1000, this.leaderTtlMs / 2),
      tls: this.#options.etcdTls,
      user: this.#options.etcdUser,
    };
    this.#client = await createEtcdClient(clientOptions);
    // Serve nothing until etcd has let this node use its prefix; ask again while etcd is down.
    for (;;) {
      if (this.#closing) {
        this.#client.close();
        return;
      }
      try {
        await checkEtcdAccess(this.#client, clientOptions, this.#layout);
        break;
      } catch (error) {
        if (this.#refused(error)) return;
        await new Promise((resolve) => setTimeout(resolve, Math.min(500, this.leaderTtlMs / 4)));
      }
    }
    this.#newLease();
    void this.#watch();
    const tick = Math.min(100, this.leaderTtlMs / 10);
    this.#monitor = setInterval(() => this.#check(), tick);
    this.#monitor.unref();
  }

  #newLease(): void {
    const ttlSeconds = this.leaderTtlMs / 1000;
    const confidence = this.#confidence;
    const requestedAt = confidence.requested();
    const lease = this.#client!.lease(ttlSeconds, { autoKeepAlive: true });
    this.#lease = lease;
    this.#leaseId = undefined;
    lease.grant().then(
      (id) => {
        if (lease !== this.#lease) return;
        this.#leaseId = id;
        confidence.granted(requestedAt);
      },
      noop, // 'lost' follows
    );
    lease.on('keepaliveFired', () => confidence.keepaliveSent());
    lease.on('keepaliveSucceeded', () => confidence.keepaliveAnswered());
    lease.on('keepaliveFailed', () => confidence.keepaliveFailed());
    lease.on('lost', (error: Error) => {
      if (lease !== this.#lease || this.#closed) return;
      confidence.lost();
      this.#stepDown('lease lost', error);
      publish(channels.clusterRole, () => ({ node: this, role: this.#role, reason: 'lease lost', error }));
      setTimeout(() => {
        if (!this.#closed) this.#newLease();
      }, 100).unref();
    });
  }

  /** Runs every ~100 ms: steps down a leader whose lease is in doubt, and campaigns when there is
   * no leader (the watch reacts faster; this covers a watch that is down). */
  #check(): void {
    if (this.#closing || this.#accessError !== undefined) return;
    this.#reportEtcd();
    if (!this.#confidence.confirmed) {
      this.#stepDown('lease not confirmed');
      return;
    }
    const pollMs = Math.min(500, this.leaderTtlMs / 4);
    if (this.#role === 'follower' && monotonic() - this.#lastCampaign >= pollMs) void this.#campaign();
  }

  /** Publishes each change of whether etcd confirms this node's lease (not while starting). */
  #reportEtcd(): void {
    const reachable = this.#confidence.confirmed;
    if (reachable === this.#etcdReachable) return;
    if (!reachable && this.#etcdReachable === undefined && monotonic() - this.#startedAt < this.leaderTtlMs) return;
    this.#etcdReachable = reachable;
    publish(channels.clusterEtcd, () => ({ node: this, reachable }));
  }

  async #watch(): Promise<void> {
    const client = this.#client!;
    try {
      const watcher = await client.watch().key(this.#layout.leader).create();
      if (this.#closing) {
        await watcher.cancel();
        return;
      }
      this.#watcher = watcher;
      watcher.on('put', (kv: IKeyValue) => this.#observed(kv));
      watcher.on('delete', () => this.#observed(undefined));
      watcher.on('error', noop);
    } catch {
      if (!this.#closing) setTimeout(() => void this.#watch(), 500).unref();
    }
  }

  /** The leader key as etcd reported it (`undefined`: absent). */
  #observed(kv: IKeyValue | undefined): void {
    if (this.#closing) return;
    if (this.#role !== 'follower' && kv?.create_revision !== this.#leaderRevision) this.#stepDown('leader key changed');
    this.#setLeader(kv?.value.toString('latin1'));
    if (kv === undefined) void this.#campaign();
  }

  #setLeader(leader: string | undefined): void {
    if (leader === this.#leader) return;
    this.#leader = leader;
    publish(channels.clusterLeader, () => ({ node: this, leader }));
    // A leader announces itself once it serves (#takeOver); a follower passes on any other node.
    if (leader !== undefined && leader !== this.advertise && this.#role === 'follower')
      this.#host!.broadcast(formatLeader(leader));
  }

  async #campaign(): Promise<void> {
    if (this.#campaigning || this.#role !== 'follower' || this.#closing || this.#leaseId === undefined) return;
    if (!this.#confidence.confirmed) return;
    this.#campaigning = true;
    this.#lastCampaign = monotonic();
    const leaseId = this.#leaseId;
    const term = this.#term;
    const leaderKey = this.#layout.leader;
    try {
      const result = await this.#client!.kv.txn({
        compare: [{ key: leaderKey, target: 'Create', result: 'Equal', create_revision: 0 }],
        success: [{ request_put: { key: leaderKey, value: Buffer.from(this.advertise, 'latin1'), lease: leaseId } }],
        failure: [{ request_range: { key: leaderKey } }],
      });
      if (term !== this.#term || this.#closing) return;
      if (result.succeeded) {
        await this.#takeOver(result.header.revision);
        return;
      }
      const kv = result.responses[0]?.response_range.kvs[0];
      // Ours already (an earlier campaign committed but its answer was lost).
      if (kv !== undefined && kv.lease === leaseId) await this.#takeOver(kv.create_revision);
      else this.#setLeader(kv?.value.toString('latin1'));
    } catch (error) {
      if (!this.#refused(error))
        publish(channels.clusterRole, () => ({ node: this, role: this.#role, reason: 'campaign failed', error }));
    } finally {
      this.#campaigning = false;
    }
  }

  /** We hold the leader key: rebuild the table from etcd, then serve. */
  async #takeOver(revision: string): Promise<void> {
    const term = ++this.#term;
    this.#role = 'catching-up';
    this.#leaderRevision = revision;
    publish(channels.clusterRole, () => ({ node: this, role: this.#role, reason: 'elected' }));
    try {
      const snapshot = await this.#client!.kv.range({ key: this.#layout.all, range_end: this.#layout.allEnd });
      if (term !== this.#term) return;
      const leaderKey = this.#layout.leader.toString('latin1');
      const mine = snapshot.kvs.find((kv) => kv.key.toString('latin1') === leaderKey);
      if (mine?.create_revision !== revision) throw new Error('leader key changed during takeover');
      const { grants, reservation } = decodeSnapshot(this.#layout, snapshot.kvs);
      const state = new TicketState({
        leaseMs: this.#options.leaseMs,
        maxKeys: this.#options.maxKeys,
        maxWaiters: this.#options.maxWaiters,
        maxWaitersPerKey: this.#options.maxWaitersPerKey,
        lastToken: reservation,
        expiry: 'eager',
      });
      // Every grant's lease restarts at OUR now: never a deadline from another node's clock.
      const now = this.#host!.now();
      for (const grant of grants) state.adopt(grant.key, grant.owner, grant.token, now);
      this.#commits = new CommitLoop({
        kv: this.#client!.kv,
        layout: this.#layout,
        revision,
        state,
        reservation,
        host: this.#host!,
        lease: this.#confidence,
        window: this.#options.commitWindow,
        maxTxnOps: this.#options.maxTxnOps,
        node: this,
        stepDown: (reason, error) => this.#stepDown(reason, error),
        refused: (error) => this.#refused(error),
      });
      this.#role = 'leader';
      this.#host!.setState(state);
      this.#leader = this.advertise;
      publish(channels.clusterRole, () => ({ node: this, role: this.#role, reason: 'serving', grants: grants.length }));
      publish(channels.clusterLeader, () => ({ node: this, leader: this.advertise }));
      this.#host!.broadcast(formatLeader(this.advertise));
    } catch (error) {
      if (term === this.#term) this.#stepDown('takeover failed', error);
      this.#refused(error);
    }
  }

  /**
   * Whether `error` says etcd will never let this node in (TLS, user or permission refused). The
   * first such error ends the node: it steps down, stops campaigning, and the server reports the
   * error and closes. Retrying would only hide a wrong configuration behind `E no_leader`.
   */
  #refused(error: unknown): boolean {
    const accessError = asAccessError(error, this.#options.etcdUser?.name, this.prefix);
    if (accessError === undefined || this.#closing) return accessError !== undefined;
    if (this.#accessError !== undefined) return true;
    this.#accessError = accessError;
    this.#stepDown('etcd refused this node', accessError);
    publish(channels.clusterRole, () => ({
      node: this,
      role: this.#role,
      reason: 'etcd refused this node',
      error: accessError,
    }));
    this.#host!.fail(accessError);
    return true;
  }

  /** Ends a term at once (see the file comment); gives the key up if etcd still has it ours. */
  #stepDown(reason: string, error?: unknown): void {
    if (this.#role === 'follower') return;
    const revision = this.#leaderRevision;
    this.#endTerm(reason, error);
    if (revision === undefined || this.#client === undefined) return;
    const leaderKey = this.#layout.leader;
    this.#client.kv
      .txn({
        compare: [{ key: leaderKey, target: 'Create', result: 'Equal', create_revision: revision }],
        success: [{ request_delete_range: { key: leaderKey } }],
      })
      .catch(noop);
  }

  #endTerm(reason: string, error?: unknown): void {
    if (this.#role === 'follower') return;
    this.#term++;
    this.#role = 'follower';
    this.#leaderRevision = undefined;
    this.#commits?.stop(); // the open batch never sent, the sent ones' replies dropped
    this.#commits = undefined;
    this.#leader = undefined;
    this.#host!.setState(undefined, this.#closing ? 'shutting down' : 'leadership lost');
    publish(channels.clusterRole, () => ({ node: this, role: this.#role, reason, error }));
  }
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('timed out')), ms);
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}
