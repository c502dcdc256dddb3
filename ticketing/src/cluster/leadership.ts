/**
 * A cluster node's leadership: it keeps the node's etcd lease (feeding lease-confidence.ts),
 * watches the leader key, campaigns when the key is absent, takes over, and steps down. While a
 * term lasts it runs the term's commit loop (commit-loop.ts).
 *
 * Its invariant: a term begins only when this node's txn created the absent leader key bound to
 * this node's confirmed lease, and serves only once one read of the prefix still shows that key;
 * it ends at the first doubt (the key changed, the lease lost or unconfirmed, a commit failed,
 * etcd refused the node), and ending it drops the state and the commit loop before anything else
 * runs. The design: docs/ticketing-cluster.md, "How it works" (leadership and step-down).
 */
import type { Etcd3, IKeyValue, Lease, Watcher } from 'etcd3';
import { channels, publish } from '../events.js';
import { formatLeader } from '../protocol.js';
import type { GateHost } from '../server/cluster-host.js';
import { TicketState } from '../state.js';
import { CommitLoop } from './commit-loop.js';
import { asAccessError, checkEtcdAccess, createEtcdClient } from './etcd.js';
import type { EtcdAccessError } from './errors.js';
import type { LeaseConfidence } from './lease-confidence.js';
import type { ClusterConfig } from './options.js';
import { decodeSnapshot, type KeyLayout } from './store.js';

export type Role = 'follower' | 'catching-up' | 'leader';

export interface LeadershipOptions {
  readonly config: ClusterConfig;
  readonly layout: KeyLayout;
  /** Fed here from the lease's events; asked before campaigning, committing and delivering. */
  readonly confidence: LeaseConfidence;
  /** What the cluster events name as their `node`. */
  readonly node: object;
}

const monotonic = (): number => performance.now();
const noop = (): void => {};

export class Leadership {
  readonly #options: ClusterConfig;
  readonly #layout: KeyLayout;
  readonly #confidence: LeaseConfidence;
  readonly #node: object;
  readonly #advertise: string;
  readonly #ttlMs: number;
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

  constructor(options: LeadershipOptions) {
    this.#options = options.config;
    this.#layout = options.layout;
    this.#confidence = options.confidence;
    this.#node = options.node;
    this.#advertise = options.config.advertise;
    this.#ttlMs = options.config.leaderTtlMs;
  }

  get role(): Role {
    return this.#role;
  }

  /** The leader's advertise address as last seen in etcd (undefined: none). */
  get leader(): string | undefined {
    return this.#leader;
  }

  get closing(): boolean {
    return this.#closing;
  }

  /** Why etcd refused this node for good, once it has. */
  get accessError(): EtcdAccessError | undefined {
    return this.#accessError;
  }

  /** The term's commit loop while this node leads. */
  get commits(): CommitLoop | undefined {
    return this.#commits;
  }

  /** Connects to etcd and begins: lease, watch, campaigns. */
  start(host: GateHost): void {
    this.#host = host;
    void this.#start();
  }

  /** Commits what is pending (bounded), ends the term, and gives the lease up. */
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

  async #start(): Promise<void> {
    const clientOptions = {
      hosts: this.#options.etcd,
      callTimeoutMs: this.#options.callTimeoutMs,
      hostCooldownMs: Math.min(1000, this.#ttlMs / 2),
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
        await new Promise((resolve) => setTimeout(resolve, Math.min(500, this.#ttlMs / 4)));
      }
    }
    this.#newLease();
    void this.#watch();
    const tick = Math.min(100, this.#ttlMs / 10);
    this.#monitor = setInterval(() => this.#check(), tick);
    this.#monitor.unref();
  }

  #newLease(): void {
    const ttlSeconds = this.#ttlMs / 1000;
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
      this.stepDown('lease lost', error);
      publish(channels.clusterRole, () => ({ node: this.#node, role: this.#role, reason: 'lease lost', error }));
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
      this.stepDown('lease not confirmed');
      return;
    }
    const pollMs = Math.min(500, this.#ttlMs / 4);
    if (this.#role === 'follower' && monotonic() - this.#lastCampaign >= pollMs) void this.#campaign();
  }

  /** Publishes each change of whether etcd confirms this node's lease (not while starting). */
  #reportEtcd(): void {
    const reachable = this.#confidence.confirmed;
    if (reachable === this.#etcdReachable) return;
    if (!reachable && this.#etcdReachable === undefined && monotonic() - this.#startedAt < this.#ttlMs) return;
    this.#etcdReachable = reachable;
    publish(channels.clusterEtcd, () => ({ node: this.#node, reachable }));
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
    if (this.#role !== 'follower' && kv?.create_revision !== this.#leaderRevision) this.stepDown('leader key changed');
    this.#setLeader(kv?.value.toString('latin1'));
    if (kv === undefined) void this.#campaign();
  }

  #setLeader(leader: string | undefined): void {
    if (leader === this.#leader) return;
    this.#leader = leader;
    publish(channels.clusterLeader, () => ({ node: this.#node, leader }));
    // A leader announces itself once it serves (#takeOver); a follower passes on any other node.
    if (leader !== undefined && leader !== this.#advertise && this.#role === 'follower')
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
        success: [{ request_put: { key: leaderKey, value: Buffer.from(this.#advertise, 'latin1'), lease: leaseId } }],
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
        publish(channels.clusterRole, () => ({ node: this.#node, role: this.#role, reason: 'campaign failed', error }));
    } finally {
      this.#campaigning = false;
    }
  }

  /** We hold the leader key: rebuild the table from etcd, then serve. */
  async #takeOver(revision: string): Promise<void> {
    const term = ++this.#term;
    this.#role = 'catching-up';
    this.#leaderRevision = revision;
    publish(channels.clusterRole, () => ({ node: this.#node, role: this.#role, reason: 'elected' }));
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
        maxSharedHolders: this.#options.maxSharedHolders,
        maxPermits: this.#options.maxPermits,
        lastToken: reservation,
        expiry: 'eager',
      });
      // Every grant's lease restarts at OUR now: never a deadline from another node's clock.
      const now = this.#host!.now();
      for (const { key, owner, token, mode, slot, rev, value } of grants) {
        state.apply({ type: 'adopt', key, owner, token, mode, slot, rev, value }, now);
      }
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
        node: this.#node,
        stepDown: (reason, error) => this.stepDown(reason, error),
        refused: (error) => this.#refused(error),
      });
      this.#role = 'leader';
      this.#host!.setState(state);
      this.#leader = this.#advertise;
      publish(channels.clusterRole, () => ({
        node: this.#node,
        role: this.#role,
        reason: 'serving',
        grants: grants.length,
      }));
      publish(channels.clusterLeader, () => ({ node: this.#node, leader: this.#advertise }));
      this.#host!.broadcast(formatLeader(this.#advertise));
    } catch (error) {
      if (term === this.#term) this.stepDown('takeover failed', error);
      this.#refused(error);
    }
  }

  /**
   * Whether `error` says etcd will never let this node in (TLS, user or permission refused). The
   * first such error ends the node: it steps down, stops campaigning, and the server reports the
   * error and closes. Retrying would only hide a wrong configuration behind `E no_leader`.
   */
  #refused(error: unknown): boolean {
    const { etcdUser, etcdTls, prefix } = this.#options;
    const accessError = asAccessError(error, etcdUser?.name, prefix, etcdTls?.cert);
    if (accessError === undefined || this.#closing) return accessError !== undefined;
    if (this.#accessError !== undefined) return true;
    this.#accessError = accessError;
    this.stepDown('etcd refused this node', accessError);
    publish(channels.clusterRole, () => ({
      node: this.#node,
      role: this.#role,
      reason: 'etcd refused this node',
      error: accessError,
    }));
    this.#host!.fail(accessError);
    return true;
  }

  /** Ends a term at once (see the file comment); gives the key up if etcd still has it ours. */
  stepDown(reason: string, error?: unknown): void {
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
    publish(channels.clusterRole, () => ({ node: this.#node, role: this.#role, reason, error }));
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
