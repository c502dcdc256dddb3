/**
 * Access control in cluster mode (docs/ticketing-access.md "Cluster mode"), on a real etcd (one
 * member on loopback) and two Ticketing nodes with the same `--acl-file`: the leader applies the
 * rules (`F`) and the quotas; a follower checks who a connection is before it redirects; and a new
 * leader counts quotas from zero (the grants it adopts from etcd count against no identity).
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LineSocket, tokenOf, until } from '../helpers.js';
import {
  findEtcd,
  PROBE_KEY,
  probeNode,
  startEtcdCluster,
  startTicketingNodes,
  type EtcdCluster,
  type ProbeResult,
} from './harness.mjs';

const etcd = await findEtcd();
if (etcd.reason !== undefined) console.warn(`cluster access control tests skipped: ${etcd.reason}`);

const sha256 = (secret: string): string => createHash('sha256').update(secret).digest('hex');

describe.skipIf(etcd.reason !== undefined)('access control in cluster mode', () => {
  let cluster: EtcdCluster;
  const dir = mkdtempSync(join(tmpdir(), 'ticketing-cluster-acl-'));
  const aclFile = join(dir, 'acl.json');

  beforeAll(async () => {
    cluster = await startEtcdCluster({ members: 1 });
    const identities = [
      {
        name: 'billing',
        secretSha256: sha256('billing-secret'),
        allow: [{ prefix: 'billing/', verbs: ['lock'] }],
        maxHeld: 1,
      },
      // The harness finds the leader by releasing PROBE_KEY (nothing held).
      { name: 'probe', secretSha256: sha256('probe-secret'), allow: [{ prefix: PROBE_KEY, verbs: ['lock'] }] },
    ];
    writeFileSync(aclFile, JSON.stringify({ identities }));
  }, 60_000);

  afterAll(async () => {
    await cluster?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('the leader refuses with F and counts quotas; a follower authenticates, then redirects; a new leader counts from zero', async () => {
    const group = await startTicketingNodes({
      count: 2,
      etcdEndpoints: cluster.endpoints,
      leaderTtl: '1s',
      lease: '30s',
      extraArgs: ['--acl-file', aclFile],
    });
    try {
      const leader = await group.waitForLeader({ timeoutMs: 15_000, secret: 'probe-secret' });
      const follower = group.nodes.find((node) => node !== leader)!;
      const onLeader = await LineSocket.connect(leader.port, leader.host);
      onLeader.write('H billing-secret\nA orders/1 b1 0\nA billing/1 b2 0\n');
      expect(await onLeader.readLine(10_000)).toBe('F b1 orders/1');
      const token = tokenOf(await onLeader.readLine(10_000));
      onLeader.write('A billing/2 b3 0\n');
      expect(await onLeader.readLine(10_000)).toBe('B b3 billing/2'); // maxHeld 1

      const wrong = await LineSocket.connect(follower.port, follower.host);
      wrong.write('H wrong\nW\n');
      expect(await wrong.readLine()).toBe('E auth_failed');
      // Authenticated, it is redirected (once the follower has seen the new leader in etcd).
      let answer: ProbeResult | undefined;
      await until(
        async () => (answer = await probeNode(follower.address, { secret: 'billing-secret' })).role === 'follower',
        'a redirect from the follower',
        10_000,
      );
      expect(answer).toEqual({ role: 'follower', leader: leader.address });
      wrong.destroy();
      onLeader.destroy();

      await leader.kill('SIGKILL');
      const next = await group.waitForLeader({ timeoutMs: 15_000, not: leader, secret: 'probe-secret' });
      const onNext = await LineSocket.connect(next.port, next.host);
      // The adopted grant of billing/1 counts against no identity: billing may take another key.
      onNext.write(`H billing-secret\nA billing/2 b4 0\nR billing/1 ${token}\n`);
      expect(await onNext.readLine(10_000)).toMatch(/^A \d+ b4 billing\/2$/);
      expect(await onNext.readLine(10_000)).toBe(`R ${token} billing/1`);
      onNext.write('A billing/3 b5 0\n');
      expect(await onNext.readLine(10_000)).toBe('B b5 billing/3');
      onNext.destroy();
    } finally {
      await group.stop(2_000);
    }
  }, 90_000);
});
