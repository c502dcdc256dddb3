/**
 * The leader's commit loop without etcd: the etcd KV client is replaced at the boundary by one
 * whose txns the test answers (or fails) by hand, and the lease confidence by a flag. What is
 * checked is the loop's invariant: a reply leaves only after its txn committed, under the term's
 * guard, while the lease is sure; anything else ends the term and delivers nothing.
 */
import { describe, expect, it } from 'vitest';
import type { ITxnRequest, ITxnResponse } from 'etcd3';
import { CommitLoop } from '../../src/cluster/commit-loop.js';
import { KeyLayout } from '../../src/cluster/store.js';
import type { HeldReply } from '../../src/server/cluster-host.js';
import { TicketState } from '../../src/state.js';

const NOW = 1_800_000_000_000;
const LEASE_MS = 5_000;
const REVISION = '42';

/** A txn the test has not answered yet. */
interface PendingTxn {
  readonly request: ITxnRequest;
  answer(succeeded: boolean): void;
  fail(error: Error): void;
}

function setup() {
  const txns: PendingTxn[] = [];
  const kv = {
    txn: (request: ITxnRequest) =>
      new Promise<ITxnResponse>((resolve, reject) =>
        txns.push({ request, answer: (succeeded) => resolve({ succeeded } as ITxnResponse), fail: reject }),
      ),
  };
  const delivered: HeldReply[] = [];
  const steppedDown: string[] = [];
  const lease = { confirmed: true };
  const state = new TicketState({ leaseMs: LEASE_MS, expiry: 'eager' });
  const loop = new CommitLoop({
    kv: kv as never,
    layout: new KeyLayout('/t/'),
    revision: REVISION,
    state,
    reservation: 0n,
    host: {
      deliver: (replies) => delivered.push(...replies),
      // As the server applies a gate's command: to the state, its effects back to the gate.
      apply: (command) => {
        for (const effect of state.apply(command, NOW)) loop.effect(effect);
      },
      now: () => NOW,
    },
    lease,
    window: 4,
    maxTxnOps: 128,
    node: {},
    stepDown: (reason) => steppedDown.push(reason),
    refused: () => {},
  });
  /** Applies an acquire as the server does: its effects to the loop, then its `A` held. */
  const acquire = (key: string): bigint => {
    let token = 0n;
    for (const effect of state.apply({ type: 'acquire', session: 1, key, owner: 'o', waitMs: 0 }, NOW)) {
      loop.effect(effect);
      if (effect.type === 'granted') token = effect.token;
    }
    loop.hold({ session: 1, line: `A ${token}`, grant: { key, token } });
    return token;
  };
  return { txns, delivered, steppedDown, lease, state, loop, acquire };
}

/** Lets the loop's `setImmediate` and the txn's continuations run. */
const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('CommitLoop', () => {
  it('holds a reply until its txn commits, under the term guard, then restarts the lease from delivery', async () => {
    const { txns, delivered, steppedDown, state, acquire } = setup();
    const token = acquire('k');
    await turn();
    expect(txns).toHaveLength(1);
    const { compare, success } = txns[0]!.request;
    expect(compare).toEqual([
      { key: Buffer.from('/t/leader'), target: 'Create', result: 'Equal', create_revision: REVISION },
    ]);
    const written = (success ?? []).map((op) => op.request_put?.key?.toString());
    expect(written).toEqual(['/t/hwm', '/t/keys/k']); // the first batch reserves tokens ahead
    expect(delivered).toEqual([]);
    txns[0]!.answer(true);
    await turn();
    expect(delivered.map((r) => r.line)).toEqual([`A ${token}`]);
    expect(state.get('k')!.expiresAt).toBe(NOW + 100 + LEASE_MS); // counted from the A's write, plus slack
    expect(steppedDown).toEqual([]);
  });

  it('a lease in doubt when etcd answers (a stopped process): nothing delivered, the term ends', async () => {
    const { txns, delivered, steppedDown, lease, acquire } = setup();
    acquire('k');
    await turn();
    lease.confirmed = false;
    txns[0]!.answer(true);
    await turn();
    expect(delivered).toEqual([]);
    expect(steppedDown).toEqual(['lease not confirmed']);
  });

  it('a guard that fails (another leader): nothing delivered, the term ends', async () => {
    const { txns, delivered, steppedDown, acquire } = setup();
    acquire('k');
    await turn();
    txns[0]!.answer(false);
    await turn();
    expect(delivered).toEqual([]);
    expect(steppedDown).toEqual(['commit failed']);
  });

  it('retries a txn of unknown outcome while the lease is sure, then delivers once', async () => {
    const { txns, delivered, steppedDown, acquire } = setup();
    acquire('k');
    await turn();
    txns[0]!.fail(new Error('etcd electing'));
    await expect.poll(() => txns.length).toBe(2);
    expect(txns[1]!.request).toEqual(txns[0]!.request);
    txns[1]!.answer(true);
    await expect.poll(() => delivered.length).toBe(1);
    expect(steppedDown).toEqual([]);
  });

  it('stopped with a txn in flight (the term ended): its answer delivers nothing, and nothing more is sent', async () => {
    const { txns, delivered, steppedDown, loop, acquire } = setup();
    acquire('a');
    await turn();
    loop.stop();
    acquire('b');
    txns[0]!.answer(true);
    await turn();
    await turn();
    expect(delivered).toEqual([]);
    expect(txns).toHaveLength(1);
    expect(steppedDown).toEqual([]);
  });

  it('drain resolves once everything pending has committed', async () => {
    const { txns, delivered, loop, acquire } = setup();
    acquire('k');
    let drained = false;
    const draining = loop.drain(60_000).then(() => (drained = true));
    await turn();
    expect(drained).toBe(false);
    txns[0]!.answer(true);
    await draining;
    expect(delivered).toHaveLength(1);
  });
});
