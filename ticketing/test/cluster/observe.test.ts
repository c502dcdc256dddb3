/** Metrics, readiness and logs of cluster nodes on a real 3-member etcd: exactly one node reports
 * ticketing_is_leader 1 before and after a leader SIGKILL, leader changes are counted, commits are
 * timed, a grant's lease restart at its commit is counted and logged, and a follower's /readyz and
 * /v1/locks say where the leader is. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request, sample, type Answer } from '../observe/support.js';
import {
  findEtcd,
  freePorts,
  startEtcdCluster,
  startTicketingNodes,
  type EtcdCluster,
  type TicketingNodes,
} from './harness.mjs';
import { ask, sleep } from './support.js';

const etcd = await findEtcd();
if (etcd.reason !== undefined) console.warn(`cluster observe tests skipped: ${etcd.reason}`);

describe.skipIf(etcd.reason !== undefined)('cluster metrics on a real etcd', () => {
  let cluster: EtcdCluster;
  let nodes: TicketingNodes;
  let httpPorts: number[];

  beforeAll(async () => {
    cluster = await startEtcdCluster({ members: 3 });
    httpPorts = await freePorts(3);
    nodes = await startTicketingNodes({
      count: 3,
      etcdEndpoints: cluster.endpoints,
      nodeArgs: httpPorts.map((port) => ['--http', `127.0.0.1:${port}`, '--log-level', 'debug']),
    });
  }, 60_000);

  afterAll(async () => {
    await nodes?.stop();
    await cluster?.stop();
  });

  async function leaderSum(alive: number[]): Promise<number> {
    let sum = 0;
    for (const i of alive) sum += sample((await request(httpPorts[i]!, '/metrics')).body, 'ticketing_is_leader') ?? NaN;
    return sum;
  }

  /** A follower learns the leader from its etcd watch, after the leader itself knows: it is ready
   * (redirecting) from then on, so the test waits for that, bounded. */
  async function readyzWhenReady(port: number, timeoutMs = 10_000): Promise<Answer> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const answer = await request(port, '/readyz');
      if (answer.status === 200 || Date.now() >= deadline) return answer;
      await sleep(50);
    }
  }

  it('is_leader sums to 1 before and after a leader failover; leader changes, commits and lease restarts are counted', async () => {
    const leader = await nodes.waitForLeader();
    const all = [0, 1, 2];
    expect(await leaderSum(all)).toBe(1);
    expect(sample((await request(httpPorts[leader.index]!, '/metrics')).body, 'ticketing_is_leader')).toBe(1);
    expect(/^A /.test(await ask(leader.address, 'A metrics-key o 0'))).toBe(true);
    const leaderText = (await request(httpPorts[leader.index]!, '/metrics')).body;
    expect(sample(leaderText, 'ticketing_etcd_commit_seconds_count')).toBeGreaterThan(0);
    // The grant's lease restarted once its commit let the A leave: counted, and logged at debug.
    expect(sample(leaderText, 'ticketing_lease_restarts_total')).toBe(1);
    const restarted = (): boolean => /"msg":"lease restarted at commit"/.test(leader.stderr);
    for (const deadline = Date.now() + 5_000; !restarted() && Date.now() < deadline;) await sleep(20);
    const restartLine = leader.stderr.split('\n').find((line) => line.includes('lease restarted at commit'));
    expect(JSON.parse(restartLine ?? '{}')).toMatchObject({ level: 'debug', key: 'metrics-key', owner: 'o' });
    const follower = all.find((i) => i !== leader.index)!;
    const readyz = await readyzWhenReady(httpPorts[follower]!);
    expect(readyz).toMatchObject({ status: 200, body: 'ok\n' });
    const locks = await request(httpPorts[follower]!, '/v1/locks');
    expect(locks.status).toBe(503);
    expect(JSON.parse(locks.body)).toEqual({ error: 'not_leader', leader: leader.address });
    const before = sample((await request(httpPorts[follower]!, '/metrics')).body, 'ticketing_leader_changes_total')!;
    expect(before).toBeGreaterThanOrEqual(1);

    await leader.kill('SIGKILL');
    const next = await nodes.waitForLeader({ not: leader, timeoutMs: 20_000 });
    const alive = all.filter((i) => i !== leader.index);
    const deadline = Date.now() + 10_000;
    let sum = await leaderSum(alive);
    while (sum !== 1 && Date.now() < deadline) sum = await leaderSum(alive);
    expect(sum).toBe(1);
    expect(sample((await request(httpPorts[next.index]!, '/metrics')).body, 'ticketing_is_leader')).toBe(1);
    const after = sample((await request(httpPorts[follower]!, '/metrics')).body, 'ticketing_leader_changes_total')!;
    expect(after).toBeGreaterThan(before);
    // The new leader's log says so.
    const messages = next.stderr
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => (JSON.parse(line) as { msg: string }).msg);
    expect(messages).toContain('elected: catching up from etcd');
    expect(messages).toContain('serving as leader');
  }, 60_000);
});
