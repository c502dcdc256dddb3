/**
 * The leader's commit loop, one per term: it feeds the state's effects and the held replies to
 * the commit window (pipeline.ts), sends each batch the window lets go as guarded etcd txns, and
 * delivers replies once their batches have committed.
 *
 * Its invariant: nothing reaches etcd or a client unless this term still holds the leader key and
 * the lease is sure. Every txn compares the leader key's create revision with the term's; replies
 * leave only after their txns committed and while the lease is still confirmed; a failed commit,
 * or a lease in doubt, ends the term through `stepDown`, after which the loop sends and delivers
 * nothing more. The design: docs/ticketing-cluster.md, "How it works" (group commit) and "The
 * commit window".
 */
import type { Etcd3, ICompare, IRequestOp } from 'etcd3';
import { channels, publish } from '../events.js';
import type { GateHost, HeldReply } from '../server/cluster-host.js';
import type { Effect } from '../state-types.js';
import type { TicketState } from '../state.js';
import { asAccessError } from './etcd.js';
import type { LeaseConfidence } from './lease-confidence.js';
import { CommitWindow, type Batch } from './pipeline.js';
import { encodeHolders, type KeyLayout } from './store.js';

/** See `#commit`: how much later than its write a grant's lease starts. */
const DELIVERY_SLACK_MS = 100;

export interface CommitLoopOptions {
  readonly kv: Etcd3['kv'];
  readonly layout: KeyLayout;
  /** The create revision of the leader key this term holds. */
  readonly revision: string;
  /** The table this term serves (rebuilt from etcd at takeover). */
  readonly state: TicketState;
  /** The token reservation as the term read it from etcd. */
  readonly reservation: bigint;
  readonly host: Pick<GateHost, 'deliver' | 'apply' | 'now'>;
  readonly lease: Pick<LeaseConfidence, 'confirmed'>;
  /** Most batches in flight. */
  readonly window: number;
  /** etcd's `--max-txn-ops`. */
  readonly maxTxnOps: number;
  /** What the commit events name as their `node`. */
  readonly node: object;
  /** Ends the term (the node steps down, and stops this loop). */
  readonly stepDown: (reason: string, error?: unknown) => void;
  /** Passes a failed commit's error on, in case etcd refused this node for good. */
  readonly refused: (error: unknown) => void;
}

export class CommitLoop {
  readonly #options: CommitLoopOptions;
  readonly #window: CommitWindow;
  /** Every txn of this term holds only while the leader key is still the one it created. */
  readonly #guard: ICompare[];
  #stopped = false;
  #scheduled = false;
  #onIdle: (() => void) | undefined;

  constructor(options: CommitLoopOptions) {
    this.#options = options;
    this.#window = new CommitWindow(options.window, options.reservation);
    this.#guard = [
      { key: options.layout.leader, target: 'Create', result: 'Equal', create_revision: options.revision },
    ];
  }

  /** An effect of a command applied to the state: what the next batch writes. */
  effect(effect: Effect): void {
    if (this.#stopped) return;
    switch (effect.type) {
      case 'granted':
        this.#window.grant(effect.key, effect.token);
        break;
      case 'released':
      case 'expired':
      case 'published':
        this.#window.touch(effect.key);
        break;
      default:
        return;
    }
    this.#schedule();
  }

  hold(reply: HeldReply): void {
    if (this.#stopped) return;
    this.#window.hold(reply);
    this.#schedule();
  }

  /** Commits what is pending; resolves once nothing is open or in flight, the term ends, or
   * `timeoutMs` passes. */
  drain(timeoutMs: number): Promise<void> {
    if (this.#stopped || this.#window.idle) return Promise.resolve();
    this.#schedule();
    return new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, timeoutMs);
      this.#onIdle = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  /** The term ended: the open batch is never sent, the sent ones' replies are dropped. */
  stop(): void {
    this.#stopped = true;
    this.#onIdle?.();
  }

  #schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    // After the I/O phase: everything read in this turn of the loop joins the batch.
    setImmediate(() => {
      this.#scheduled = false;
      this.#sendReady();
    });
  }

  /** Sends the open batch if the window lets it go now (one at most: taking it empties the open
   * one); reports idle when nothing is left. */
  #sendReady(): void {
    if (this.#stopped) return;
    if (this.#window.idle) {
      this.#onIdle?.();
      return;
    }
    if (!this.#options.lease.confirmed) {
      // (the guard would refuse it too once the lease is gone; do not even ask)
      this.#options.stepDown('lease not confirmed');
      return;
    }
    const batch = this.#window.take(this.#options.state.lastToken, this.#options.host.now());
    if (batch !== undefined) void this.#commit(batch);
  }

  /** The batch's writes, read from the state now (before any await). */
  #writes(batch: Batch): IRequestOp[] {
    const { layout, state } = this.#options;
    const ops: IRequestOp[] = [];
    if (batch.mark !== undefined) {
      ops.push({ request_put: { key: layout.reservation, value: Buffer.from(String(batch.mark), 'latin1') } });
    }
    for (const key of batch.touched) {
      const view = state.get(key);
      const name = layout.grantKey(key);
      ops.push(
        view === undefined
          ? { request_delete_range: { key: name } }
          : { request_put: { key: name, value: encodeHolders(view) } },
      );
    }
    return ops;
  }

  /** Commits one batch, then delivers whatever the window lets leave. */
  async #commit(batch: Batch): Promise<void> {
    const { kv, maxTxnOps, lease, host } = this.#options;
    const ops = this.#writes(batch);
    const startedAt = performance.now();
    const inFlight = this.#window.inFlight;
    try {
      // An empty batch of writes (only T/N/B answers) still takes one guarded txn: it proves this
      // node was still the leader after computing them.
      for (let i = 0; i === 0 || i < ops.length; i += maxTxnOps) {
        const success = ops.slice(i, i + maxTxnOps);
        for (;;) {
          let result;
          try {
            result = await kv.txn({ compare: this.#guard, success });
          } catch (error) {
            // Outcome unknown (etcd electing, a member gone): retry the same txn while the lease
            // is sure. Its writes are absolute and guarded by this term, so applying it twice is
            // applying it once, and no other batch writes its keys until it has committed.
            if (this.#stopped) return;
            if (!lease.confirmed || asAccessError(error, undefined, this.#options.layout.prefix) !== undefined)
              throw error;
            await new Promise((resolve) => setTimeout(resolve, 50));
            if (this.#stopped) return;
            continue;
          }
          if (this.#stopped) return;
          if (!result.succeeded) throw new Error('leader key changed: this node is deposed');
          break;
        }
      }
    } catch (error) {
      if (!this.#stopped) this.#options.stepDown('commit failed', error);
      this.#options.refused(error);
      return;
    }
    // A process stopped after etcd answered (SIGSTOP, a stall) may resume past its lease, when
    // another leader may have re-armed these grants, let them expire and granted them again: its
    // replies would then reach clients after their keys moved on. Deliver only while the lease is
    // sure, as every request is served.
    if (!lease.confirmed) {
      this.#options.stepDown('lease not confirmed');
      return;
    }
    publish(channels.clusterCommit, () => ({
      node: this.#options.node,
      writes: batch.touched.size,
      replies: batch.replies.length,
      txns: Math.max(1, Math.ceil(ops.length / maxTxnOps)),
      inFlight,
      seconds: (performance.now() - startedAt) / 1000,
    }));
    // A grant's lease counts from when its A was written (its holder cannot have learned of it
    // earlier), plus a slack for the A's way to the holder on a loaded host: a lease is never cut
    // short, and the expiry is still committed well within 1 s of the holder's deadline.
    for (const ready of this.#window.committed(batch)) {
      host.deliver(ready.replies);
      for (const { key, token } of ready.grants)
        host.apply({ type: 'restart-lease', key, token, slackMs: DELIVERY_SLACK_MS });
    }
    this.#sendReady();
  }
}
