/**
 * The loss test across a leader failover (issue 47): `ticketing run` holds a key on a 3-node
 * cluster, its command ignores SIGTERM and writes a heartbeat every 10 ms; the leader is SIGKILLed.
 * With a lease (1.5 s) shorter than the leader TTL (2 s), no node can answer the holder's keeps
 * before its local deadline, so it must kill its command then; a second `run` waits for the key
 * and gets it from the new leader. Asserted: the first command's last heartbeat comes before the
 * second command's first. The gap is printed, not asserted.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { until } from '../helpers.js';
import { beats, heartbeat, heartbeatGap, runTicketing } from '../run-helpers.js';
import {
  findEtcd,
  startEtcdCluster,
  startTicketingNodes,
  waitForLeader,
  type EtcdCluster,
  type TicketingNodes,
} from './harness.mjs';
import { sleep } from './support.js';

const etcd = await findEtcd();

describe.skipIf(etcd.reason !== undefined)('ticketing run across a leader SIGKILL', () => {
  let cluster: EtcdCluster;
  let group: TicketingNodes | undefined;
  const cleanups: Array<() => Promise<void> | void> = [];
  beforeAll(async () => {
    cluster = await startEtcdCluster({ members: 3 });
  }, 60_000);
  afterEach(async () => {
    while (cleanups.length > 0) await cleanups.pop()!();
  });
  afterAll(async () => {
    await group?.stop(2_000).catch(() => {});
    await cluster?.stop();
  }, 60_000);

  it('the holder that cannot keep through the failover stops before the next holder starts', async () => {
    const lease = 1_500;
    group = await startTicketingNodes({ etcdEndpoints: cluster.endpoints, leaderTtl: '2s', lease: `${lease}ms` });
    const leader = await waitForLeader(group.nodes, { timeoutMs: 15_000 });
    const addresses = group.addresses.join(',');
    const d = mkdtempSync(join(tmpdir(), 'ticketing-run-failover-'));
    const first = runTicketing(addresses, ['--key', 'job'], heartbeat(join(d, 'first'), true), cleanups);
    await until(
      () => beats(join(d, 'first')).length > 5 || first.child.exitCode !== null,
      'the first command to beat',
      15_000,
    );
    expect(first.child.exitCode, first.stderr()).toBeNull();
    await sleep(lease / 2);
    await leader.kill('SIGKILL');
    const second = runTicketing(
      addresses,
      ['--key', 'job', '--wait', '30s'],
      heartbeat(join(d, 'second'), false),
      cleanups,
    );
    await until(
      () => beats(join(d, 'second')).length > 0 || second.child.exitCode !== null,
      'the second command to beat',
      30_000,
    ).catch((error: Error) => {
      throw new Error(`${error.message}; first: ${first.stderr()}; second: ${second.stderr()}`);
    });
    expect(second.child.exitCode, second.stderr()).toBeNull();
    expect(heartbeatGap(join(d, 'first'), join(d, 'second'), 'leader failover')).toBeGreaterThan(0);
    expect(await first.exit).toEqual({ code: 79, signal: null });
    expect(first.stderr()).toMatch(/terminating the command/);
    second.child.kill('SIGTERM');
    await second.exit;
  }, 120_000);
});
