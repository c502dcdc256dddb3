/**
 * Cluster mode: the gate (server/cluster-host.ts `ServerGate`) that makes a TicketServer one node of a lock
 * space replicated in etcd. Only the leader serves; it drives the same TicketState as single mode,
 * so every rule and every reply byte stays the same, and it commits each state change to etcd
 * before the reply about it goes out.
 *
 * Leadership (no etcd3 Election helper): every node holds an etcd lease kept alive by etcd3. A
 * node becomes leader by a txn that creates `<prefix>leader` bound to its lease only if the key
 * is absent (`createRevision == 0`); the key's create revision then names its term. It rebuilds
 * the table from one read of the prefix (every grant's lease re-armed at its own now + the full
 * lease) and serves.
 *
 * Group commit: the keys touched by everything applied since the last batch was sent go into one
 * txn (split at `maxTxnOps`), each guarded by `leader.createRevision == term`, so a deposed or
 * paused leader's writes fail. Up to `commitWindow` batches are in flight at once, never two on
 * one key (pipeline.ts), and an idle node arms no timer. Every reply produced while a batch was
 * open is held and written, in order, only when that batch and every earlier one have committed
 * (T and N included: their truth rests on the state the batch commits).
 *
 * Step-down: a failed or unknown commit, a leader key that changed, or a lease this node can no
 * longer be sure of (no keepalive confirmed within `leaderTtl - margin`, on the monotonic clock,
 * which also catches a process that was stopped) ends the term at once: held replies are dropped,
 * the state is dropped, and every connection that sent anything gets `E not_active` and is closed.
 */
import type { Etcd3, IKeyValue, IRequestOp, Lease, Watcher } from 'etcd3';
import { channels, publish } from '../events.js';
import { formatError, formatLeader, formatMoved } from '../protocol.js';
import type { GateHost, ServerGate } from '../server/cluster-host.js';
import type { Effect } from '../state-types.js';
import { TicketState } from '../state.js';
import {
  asAccessError,
  checkEtcdAccess,
  checkEtcdClientOptions,
  createEtcdClient,
  type EtcdTlsOptions,
} from './etcd.js';
import type { EtcdAccessError } from './errors.js';
import { CommitWindow, DEFAULT_COMMIT_WINDOW, MAX_COMMIT_WINDOW, type Batch } from './pipeline.js';
import { KeyLayout, decodeSnapshot, encodeGrant } from './store.js';

export interface ClusterNodeOptions {
  /** etcd endpoints: `http://host:port`, or (all of them) `https://host:port`. */
  readonly etcd: readonly string[];
  /** TLS to https endpoints: CA (default: the system's), client certificate and key (PEM). */
  readonly etcdTls?: EtcdTlsOptions | undefined;
  /** etcd user and password, when etcd has authentication on. */
  readonly etcdUser?: { readonly name: string; readonly password: string } | undefined;
  /** `host:port` clients reach this node at: what `M` and `L` carry. */
  readonly advertise: string;
  /** Key prefix in etcd. Default `/ticketing/`. */
  readonly prefix?: string;
  /** Leadership lease, ms: a whole number of seconds (etcd's lease granularity). Default 2000. */
  readonly leaderTtlMs?: number;
  /** The grant lease of the lock table, ms. */
  readonly leaseMs: number;
  readonly maxKeys: number;
  readonly maxWaiters: number;
  readonly maxWaitersPerKey: number;
  /** Deadline of every etcd call, ms. Default 1000. */
  readonly callTimeoutMs?: number;
  /** etcd's `--max-txn-ops`. Default 128. */
  readonly maxTxnOps?: number;
  /** Most group-commit batches in flight at once. Default `DEFAULT_COMMIT_WINDOW`. */
  readonly commitWindow?: number;
}

const CLUSTER_DEFAULTS = {
  prefix: '/ticketing/',
  leaderTtlMs: 2_000,
  callTimeoutMs: 1_000,
  maxTxnOps: 128,
} as const;

type Role = 'follower' | 'catching-up' | 'leader';

/** See `#commit`: how much later than its write a grant's lease starts. */
const DELIVERY_SLACK_MS = 100;

const monotonic = (): number => performance.now();
const noop = (): void => {};

export class ClusterNode implements ServerGate {
  readonly advertise: string;
  readonly prefix: string;
  readonly leaderTtlMs: number;
  readonly #options: ClusterNodeOptions;
  readonly #layout: KeyLayout;
  readonly #callTimeoutMs: number;
  readonly #maxTxnOps: number;
  readonly #commitWindow: number;
  /** A lease keepalive confirmed at t (monotonic) proves the lease alive until t + ttl; this
   * node stops relying on it `#margin` before that. */
  readonly #margin: number;
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
  #state: TicketState | undefined;
  /** The leader's advertise address as last seen in etcd. */
  #leader: string | undefined;
  #aliveUntil = -Infinity;
  readonly #firedAt: number[] = [];
  #campaigning = false;
  #lastCampaign = -Infinity;
  /** Set once etcd has refused this node for good (see #refused). */
  #accessError: EtcdAccessError | undefined;
  #startedAt = monotonic();
  /** As last published on `clusterEtcd` (undefined: not yet). */
  #etcdReachable: boolean | undefined;

  /** The leader's commit window (undefined while not leading). */
  #window: CommitWindow | undefined;
  #commitScheduled = false;
  #onIdle: (() => void) | undefined;

  constructor(options: ClusterNodeOptions) {
    this.#options = options;
    this.advertise = options.advertise;
    this.prefix = options.prefix ?? CLUSTER_DEFAULTS.prefix;
    this.leaderTtlMs = options.leaderTtlMs ?? CLUSTER_DEFAULTS.leaderTtlMs;
    if (!(this.leaderTtlMs >= 1000 && this.leaderTtlMs % 1000 === 0)) {
      throw new RangeError(`leaderTtlMs must be a whole number of seconds, at least 1s, got ${this.leaderTtlMs}`);
    }
    checkEtcdClientOptions({ hosts: options.etcd, tls: options.etcdTls, user: options.etcdUser });
    this.#layout = new KeyLayout(this.prefix);
    this.#callTimeoutMs = options.callTimeoutMs ?? CLUSTER_DEFAULTS.callTimeoutMs;
    this.#maxTxnOps = options.maxTxnOps ?? CLUSTER_DEFAULTS.maxTxnOps;
    this.#commitWindow = options.commitWindow ?? DEFAULT_COMMIT_WINDOW;
    if (!(Number.isInteger(this.#commitWindow) && this.#commitWindow >= 1 && this.#commitWindow <= MAX_COMMIT_WINDOW)) {
      throw new RangeError(`commitWindow must be an integer from 1 to ${MAX_COMMIT_WINDOW}, got ${this.#commitWindow}`);
    }
    this.#margin = Math.min(this.leaderTtlMs / 4, 1000);
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
    if (!this.#leaseConfirmed()) {
      this.#stepDown('lease not confirmed');
      return formatError('not_active', this.#aliveUntil === -Infinity ? 'starting' : 'etcd unreachable');
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
    const window = this.#window;
    if (this.#role !== 'leader' || window === undefined) return;
    switch (effect.type) {
      case 'granted':
        window.grant(effect.key, effect.token);
        break;
      case 'released':
      case 'expired':
        window.touch(effect.key);
        break;
      default:
        return;
    }
    this.#scheduleCommit();
  }

  hold(session: number, line: string, grant: { readonly key: string; readonly token: bigint } | undefined): void {
    if (this.#role !== 'leader' || this.#window === undefined) return;
    this.#window.hold({ session, line, grant });
    this.#scheduleCommit();
  }

  async close(): Promise<void> {
    if (this.#closing) return;
    this.#closing = true;
    // Let the server queue its last answers (drain answers waiters T), then commit them.
    await new Promise<void>((resolve) => setImmediate(resolve));
    if (this.#role === 'leader' && this.#window?.idle === false) {
      this.#scheduleCommit();
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 2 * this.#callTimeoutMs);
        this.#onIdle = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    const wasLeader = this.#role !== 'follower';
    this.#endTerm('shutting down');
    this.#closed = true;
    clearInterval(this.#monitor);
    // Revoking the lease deletes the leader key with it: a new leader need not wait out the TTL.
    if (wasLeader && this.#lease !== undefined) {
      await withTimeout(this.#lease.revoke(), this.#callTimeoutMs).catch(noop);
    } else {
      this.#lease?.release();
      if (this.#leaseId !== undefined) {
        await withTimeout(this.#client!.leaseClient.leaseRevoke({ ID: this.#leaseId }), this.#callTimeoutMs).catch(
          noop,
        );
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
      callTimeoutMs: this.#callTimeoutMs,
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
    const requestedAt = monotonic();
    const lease = this.#client!.lease(ttlSeconds, { autoKeepAlive: true });
    this.#lease = lease;
    this.#leaseId = undefined;
    this.#firedAt.length = 0;
    lease.grant().then(
      (id) => {
        if (lease !== this.#lease) return;
        this.#leaseId = id;
        this.#aliveUntil = Math.max(this.#aliveUntil, requestedAt + this.leaderTtlMs);
      },
      noop, // 'lost' follows
    );
    lease.on('keepaliveFired', () => this.#firedAt.push(monotonic()));
    lease.on('keepaliveSucceeded', () => {
      const firedAt = this.#firedAt.shift();
      if (firedAt !== undefined) this.#aliveUntil = Math.max(this.#aliveUntil, firedAt + this.leaderTtlMs);
    });
    lease.on('keepaliveFailed', () => (this.#firedAt.length = 0));
    lease.on('lost', (error: Error) => {
      if (lease !== this.#lease || this.#closed) return;
      this.#aliveUntil = -Infinity;
      this.#stepDown('lease lost', error);
      publish(channels.clusterRole, () => ({ node: this, role: this.#role, reason: 'lease lost', error }));
      setTimeout(() => {
        if (!this.#closed) this.#newLease();
      }, 100).unref();
    });
  }

  #leaseConfirmed(): boolean {
    return monotonic() < this.#aliveUntil - this.#margin;
  }

  /** Runs every ~100 ms: steps down a leader whose lease is in doubt, and campaigns when there is
   * no leader (the watch reacts faster; this covers a watch that is down). */
  #check(): void {
    if (this.#closing || this.#accessError !== undefined) return;
    this.#reportEtcd();
    if (!this.#leaseConfirmed()) {
      this.#stepDown('lease not confirmed');
      return;
    }
    const pollMs = Math.min(500, this.leaderTtlMs / 4);
    if (this.#role === 'follower' && monotonic() - this.#lastCampaign >= pollMs) void this.#campaign();
  }

  /** Publishes each change of whether etcd confirms this node's lease (not while starting). */
  #reportEtcd(): void {
    const reachable = this.#leaseConfirmed();
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
    if (!this.#leaseConfirmed()) return;
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
      const { grants, hwm } = decodeSnapshot(this.#layout, snapshot.kvs);
      const state = new TicketState({
        leaseMs: this.#options.leaseMs,
        maxKeys: this.#options.maxKeys,
        maxWaiters: this.#options.maxWaiters,
        maxWaitersPerKey: this.#options.maxWaitersPerKey,
        lastToken: hwm,
        expiry: 'eager',
      });
      // Every grant's lease restarts at OUR now: never a deadline from another node's clock.
      const now = this.#host!.now();
      for (const { key, owner, token } of grants) state.apply({ type: 'adopt', key, owner, token }, now);
      this.#state = state;
      this.#window = new CommitWindow(this.#commitWindow, hwm);
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
    const { etcdUser, etcdTls } = this.#options;
    const accessError = asAccessError(error, etcdUser?.name, this.prefix, etcdTls?.cert);
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
    this.#state = undefined;
    this.#window = undefined; // the open batch never sent, the sent ones' replies dropped
    this.#leader = undefined;
    this.#host!.setState(undefined, this.#closing ? 'shutting down' : 'leadership lost');
    publish(channels.clusterRole, () => ({ node: this, role: this.#role, reason, error }));
    this.#onIdle?.();
  }

  // ---------------------------------------------------------------------------------------------
  // Group commit

  #scheduleCommit(): void {
    if (this.#commitScheduled) return;
    this.#commitScheduled = true;
    // After the I/O phase: everything read in this turn of the loop joins the batch.
    setImmediate(() => {
      this.#commitScheduled = false;
      this.#sendReady();
    });
  }

  /** Sends the open batch if the window lets it go now (one at most: taking it empties the open
   * one); reports idle when nothing is left. */
  #sendReady(): void {
    const window = this.#window;
    if (this.#role !== 'leader' || window === undefined) return;
    if (window.idle) {
      this.#onIdle?.();
      return;
    }
    if (!this.#leaseConfirmed()) {
      // (the guard would refuse it too once the lease is gone; do not even ask)
      this.#stepDown('lease not confirmed');
      return;
    }
    const batch = window.take(this.#state!.lastToken, this.#host!.now());
    if (batch !== undefined) void this.#commit(window, batch);
  }

  /** Commits one batch (its writes read from the state now, before any await), then delivers
   * whatever the window lets leave. */
  async #commit(window: CommitWindow, batch: Batch): Promise<void> {
    const state = this.#state!;
    const term = this.#term;
    const ops: IRequestOp[] = [];
    if (batch.mark !== undefined) {
      ops.push({ request_put: { key: this.#layout.hwm, value: Buffer.from(String(batch.mark), 'latin1') } });
    }
    for (const key of batch.touched) {
      const view = state.get(key);
      const name = this.#layout.grantKey(key);
      ops.push(
        view === undefined
          ? { request_delete_range: { key: name } }
          : { request_put: { key: name, value: encodeGrant(view.token, view.owner) } },
      );
    }
    const startedAt = monotonic();
    const inFlight = window.inFlight;
    const guard = [
      {
        key: this.#layout.leader,
        target: 'Create' as const,
        result: 'Equal' as const,
        create_revision: this.#leaderRevision!,
      },
    ];
    try {
      // An empty batch of writes (only T/N/B answers) still takes one guarded txn: it proves this
      // node was still the leader after computing them.
      for (let i = 0; i === 0 || i < ops.length; i += this.#maxTxnOps) {
        const success = ops.slice(i, i + this.#maxTxnOps);
        for (;;) {
          let result;
          try {
            result = await this.#client!.kv.txn({ compare: guard, success });
          } catch (error) {
            // Outcome unknown (etcd electing, a member gone): retry the same txn while the lease
            // is sure. Its writes are absolute and guarded by this term, so applying it twice is
            // applying it once, and no other batch writes its keys until it has committed.
            if (term !== this.#term) return;
            if (!this.#leaseConfirmed() || asAccessError(error, undefined, this.prefix) !== undefined) throw error;
            await new Promise((resolve) => setTimeout(resolve, 50));
            if (term !== this.#term) return;
            continue;
          }
          if (term !== this.#term) return;
          if (!result.succeeded) throw new Error('leader key changed: this node is deposed');
          break;
        }
      }
    } catch (error) {
      if (term === this.#term) this.#stepDown('commit failed', error);
      this.#refused(error);
      return;
    }
    // A process stopped after etcd answered (SIGSTOP, a stall) may resume past its lease, when
    // another leader may have re-armed these grants, let them expire and granted them again: its
    // replies would then reach clients after their keys moved on. Deliver only while the lease is
    // sure, as every request is served.
    if (!this.#leaseConfirmed()) {
      this.#stepDown('lease not confirmed');
      return;
    }
    publish(channels.clusterCommit, () => ({
      node: this,
      writes: batch.touched.size,
      replies: batch.replies.length,
      txns: Math.max(1, Math.ceil(ops.length / this.#maxTxnOps)),
      inFlight,
      seconds: (monotonic() - startedAt) / 1000,
    }));
    // A grant's lease counts from when its A was written (its holder cannot have learned of it
    // earlier), plus a slack for the A's way to the holder on a loaded host: a lease is never cut
    // short, and the expiry is still committed well within 1 s of the holder's deadline.
    for (const ready of window.committed(batch)) {
      this.#host!.deliver(ready.replies);
      for (const { key, token } of ready.grants)
        this.#host!.apply({ type: 'restart-lease', key, token, slackMs: DELIVERY_SLACK_MS });
    }
    this.#sendReady();
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
