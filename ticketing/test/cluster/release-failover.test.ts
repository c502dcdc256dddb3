/**
 * A release that survives a failover (docs/ticketing-client.md): 8 loops of acquire → hold 5 ms → release
 * on 4 keys through TicketClient({ addresses }), the leader SIGKILLed (lease 5 s). Releases whose
 * answer died with the leader are sent again to the new one, so the keys do not stay held for a
 * re-armed lease. Asserted: no key held twice, and a grant after the new leader serves. The time
 * from the new leader serving to the first grant is measured and printed, not asserted.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  findEtcd,
  startEtcdCluster,
  startTicketingNodes,
  waitForLeader,
  type EtcdCluster,
  type TicketingNodes,
} from './harness.mjs';
import { checkHistory, sleep, startLoad } from './support.js';

const etcd = await findEtcd();

describe.skipIf(etcd.reason !== undefined)('release re-sent across a leader SIGKILL', () => {
  let cluster: EtcdCluster;
  let group: TicketingNodes | undefined;
  beforeAll(async () => {
    cluster = await startEtcdCluster({ members: 3 });
  }, 60_000);
  afterAll(async () => {
    await group?.stop(2_000).catch(() => {});
    await cluster?.stop();
  }, 60_000);

  it('8 loops on 4 keys, lease 5 s: no key held twice; the first grant after the new leader serves', async () => {
    const leaseMs = 5_000;
    group = await startTicketingNodes({ etcdEndpoints: cluster.endpoints, leaderTtl: '2s', lease: '5s' });
    const leader = await waitForLeader(group.nodes, { timeoutMs: 15_000 });
    const load = startLoad(group.addresses, { workers: 8, keys: 4, leaseMs, holdMs: 5 });
    try {
      await sleep(500);
      const before = load.grants.length;
      expect(before).toBeGreaterThan(0);
      const killedAt = performance.now();
      await leader.kill('SIGKILL');
      const next = await waitForLeader(group.nodes, { timeoutMs: 15_000, not: leader });
      const servingAt = performance.now();
      const deadline = servingAt + 15_000;
      while (!load.grants.some((g) => g.ackAt > servingAt) && performance.now() < deadline) await sleep(5);
      const first = load.grants.find((g) => g.ackAt > servingAt);
      expect(first, 'no grant within 15 s of the new leader serving').toBeDefined();
      console.log(
        `release re-send: leader SIGKILL → new leader ${next.address} serving at ${(servingAt - killedAt).toFixed(0)} ms; ` +
          `first grant ${(first!.ackAt - servingAt).toFixed(0)} ms after it serves (${(first!.ackAt - killedAt).toFixed(0)} ms after the kill)`,
      );
      await sleep(500);
    } finally {
      await load.stop();
    }
    checkHistory(load.grants, leaseMs);
  }, 120_000);
});
