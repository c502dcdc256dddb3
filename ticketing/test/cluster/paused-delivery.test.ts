/**
 * A leader stopped right after etcd answered its commit, and resumed past its lease, must not
 * deliver that commit's replies: by then another leader may have re-armed the grants, let them
 * expire and granted the keys again. The fault is injected at the etcd client (the answer is
 * held while the process is kept busy past the lease, as a SIGSTOP would), so the pause lands
 * exactly between the commit and its delivery every time; the node runs in this process on a real
 * 1-member etcd.
 */
import { KVClient, type ITxnRequest } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ClusterNode } from '../../src/cluster/node.js';
import { TicketServer } from '../../src/server/server.js';
import { LineSocket } from '../helpers.js';
import { findEtcd, freePorts, startEtcdCluster, type EtcdCluster } from './harness.mjs';
import { askUntil } from './support.js';

const etcd = await findEtcd();
if (etcd.reason !== undefined) console.warn(`paused delivery test skipped: ${etcd.reason}`);

const LEADER_TTL_MS = 1_000;
const PREFIX = '/paused/';

/** Keeps this process busy for `ms`: nothing else in it runs, as if it were stopped. */
function stall(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) continue;
}

const writesKey = (request: ITxnRequest, key: string): boolean =>
  (request.success ?? []).some((op) => op.request_put?.key?.toString() === `${PREFIX}keys/${key}`);

describe.skipIf(etcd.reason !== undefined)('a leader stopped between a commit and its delivery', () => {
  let cluster: EtcdCluster;

  beforeAll(async () => {
    cluster = await startEtcdCluster({ members: 1 });
  }, 30_000);

  afterAll(async () => {
    await cluster?.stop();
  });

  it('resumed past its lease: the committed A is never written; it steps down and says E not_active', async () => {
    const port = (await freePorts(1))[0]!;
    const node = new ClusterNode({
      etcd: cluster.endpoints,
      advertise: `127.0.0.1:${port}`,
      prefix: PREFIX,
      leaderTtlMs: LEADER_TTL_MS,
      leaseMs: 30_000,
      maxKeys: 100,
      maxWaiters: 100,
      maxWaitersPerKey: 10,
    });
    const server = new TicketServer({ host: '127.0.0.1', port, leaseMs: 30_000, gate: node });
    const txn = KVClient.prototype.txn; // eslint-disable-line @typescript-eslint/unbound-method
    let committed = false;
    KVClient.prototype.txn = async function (this: KVClient, ...args: Parameters<KVClient['txn']>) {
      const answer = await txn.apply(this, args);
      if (writesKey(args[0], 'paused') && answer.succeeded) {
        committed = true;
        stall(LEADER_TTL_MS + 500);
      }
      return answer;
    };
    try {
      await server.listen();
      await askUntil(`127.0.0.1:${port}`, 'A warm o 0', /^A /, 15_000);
      const socket = await LineSocket.connect(port);
      socket.write('A paused o 0\n');
      await Promise.race([socket.closedPromise, new Promise((resolve) => setTimeout(resolve, 5_000))]);
      expect(committed, 'the grant was committed in etcd').toBe(true);
      expect(socket.closed).toBe(true);
      expect(socket.lines).toEqual([expect.stringMatching(/^E not_active /)]);
      expect(node.role).not.toBe('leader');
    } finally {
      KVClient.prototype.txn = txn;
      await server.close();
    }
  }, 30_000);
});
