/**
 * Keeps (`K`) in cluster mode against a real etcd: 3 members on loopback and Ticketing nodes as
 * child processes. Holders keep their grants alive across a leader SIGKILL, a leader SIGSTOPped
 * past its TTL, and a leader cut off from etcd; the history checker asserts that no key was
 * granted to a second holder while a kept grant was live (docs/ticketing-cluster.md "Keeps").
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  findEtcd,
  startEtcdCluster,
  startTcpProxy,
  startTicketingNodes,
  waitForLeader,
  type EtcdCluster,
  type TcpProxy,
  type TicketingNode,
  type TicketingNodes,
} from './harness.mjs';
import { startKeepers, type KeeperLoad } from './keepers.js';
import { until } from '../helpers.js';
import { ask, askUntil, checkHistory, connect, sleep, type Grant, type Keep } from './support.js';

const etcd = await findEtcd();
if (etcd.reason !== undefined) console.warn(`cluster keep tests skipped: ${etcd.reason}`);

/** The grant lease of these scenarios: keeps go every third of it. Each scenario watches for a
 * second holder for a lease after its fault, so this is most of what each one takes. */
const LEASE_MS = 3_000;
const figures: string[] = [];

describe('the history checker judges keeps', () => {
  const grant = (token: bigint, ackAt: number, more: Partial<Grant> = {}): Grant => ({
    key: 'k',
    token,
    worker: 0,
    ackAt,
    ...more,
  });
  const keep = (sentAt: number, result: Keep['result'], leaseMs = 1_000): Keep => ({
    sentAt,
    to: 'n',
    result,
    leaseMs,
  });

  it('a grant to another holder before the last kept K send + its lease is a violation', () => {
    const kept = grant(1n, 0, { keeps: [keep(600, 'kept'), keep(900, 'indeterminate'), keep(950, 'gone')] });
    expect(() => checkHistory([kept, grant(2n, 1_590)], 1_000)).toThrow(/held until 1600/);
    checkHistory([kept, grant(2n, 1_600)], 1_000);
    // Without the kept K the lease from the acknowledgement is all it had.
    checkHistory([grant(1n, 0, { keeps: [keep(600, 'indeterminate')] }), grant(2n, 1_000)], 1_000);
    // A release ends it whatever was kept.
    checkHistory(
      [grant(1n, 0, { keeps: [keep(600, 'kept')], released: 'released', releaseSentAt: 700 }), grant(2n, 700)],
      1_000,
    );
  });
});

describe.skipIf(etcd.reason !== undefined)('keeps in cluster mode on a real etcd', () => {
  let cluster: EtcdCluster;
  const groups: TicketingNodes[] = [];
  const proxies: TcpProxy[] = [];
  const loads: KeeperLoad[] = [];

  beforeAll(async () => {
    cluster = await startEtcdCluster({ members: 3 });
  }, 60_000);

  afterEach(async () => {
    await Promise.all(loads.splice(0).map((load) => load.stop()));
    await Promise.all(groups.splice(0).map((group) => group.stop(2_000).catch(() => {})));
    await Promise.all(proxies.splice(0).map((proxy) => proxy.close().catch(() => {})));
  }, 30_000);

  afterAll(async () => {
    await cluster?.stop();
    if (figures.length > 0) console.log(`cluster keep figures:\n  ${figures.join('\n  ')}`);
  }, 60_000);

  async function nodes(options: Parameters<typeof startTicketingNodes>[0]): Promise<TicketingNodes> {
    const group = await startTicketingNodes(options);
    groups.push(group);
    return group;
  }

  function keepers(addresses: readonly string[]): KeeperLoad {
    const load = startKeepers(addresses, { workers: 6, keys: 3, leaseMs: LEASE_MS });
    loads.push(load);
    return load;
  }

  /** Waits (bounded) until `count` grants of `load` have had a keep answered K: holders are keeping. */
  function keeping(load: KeeperLoad, count = 3): Promise<void> {
    const kept = (): number => load.grants.filter((g) => g.keeps?.some((k) => k.result === 'kept')).length;
    return until(() => kept() >= count, `${count} grants kept`, 15_000);
  }

  /** Stops the load and checks its history; returns a one-line summary for the figures. */
  async function judge(load: KeeperLoad, what: string): Promise<Keep[]> {
    await load.stop();
    const keeps = load.grants.flatMap((g) => g.keeps ?? []);
    const by = (result: Keep['result']): number => keeps.filter((k) => k.result === result).length;
    figures.push(
      `${what}: ${load.grants.length} grants, keeps ${by('kept')} kept / ${by('gone')} gone / ${by('indeterminate')} indeterminate / ` +
        `${by('pending')} unanswered; ${JSON.stringify(Object.fromEntries(load.counts))}`,
    );
    expect(load.counts.get('unmatched'), 'a reply matched nothing sent').toBeUndefined();
    checkHistory(load.grants, LEASE_MS);
    expect(by('kept')).toBeGreaterThan(0);
    return keeps;
  }

  it('the leader answers K and G by the exact token; a follower answers M', async () => {
    const group = await nodes({ etcdEndpoints: cluster.endpoints, leaderTtl: '2s', lease: '1s' });
    const leader = await waitForLeader(group.nodes, { timeoutMs: 10_000 });
    for (const node of group.nodes) {
      if (node !== leader) await askUntil(node.address, 'K x 1', new RegExp(`^M ${leader.address}$`), 5_000);
    }
    const s = await connect(leader.address);
    s.write('A k o1 0\n');
    const [, t1] = (await s.readLine()).match(/^A (\d+) o1 k$/)!;
    // Kept three times over its 1 s lease: still held at 1.8 s, then released by its token.
    for (let i = 0; i < 3; i++) {
      await sleep(600);
      s.write(`K k ${t1}\n`);
      expect(await s.readLine()).toBe(`K ${t1} k 1000`);
    }
    expect(await ask(leader.address, 'A k o2 0')).toBe('T o2 k');
    s.write(`K k ${BigInt(t1!) + 1n}\nK nokey ${t1}\n`);
    expect(await s.readLines(2)).toEqual([`G ${BigInt(t1!) + 1n} k`, `G ${t1} nokey`]);
    s.write(`R k ${t1}\nK k ${t1}\n`);
    expect(await s.readLines(2)).toEqual([`R ${t1} k`, `G ${t1} k`]);
    // Not kept: expired eagerly after its lease, then G.
    s.write('A j o3 0\n');
    const [, t2] = (await s.readLine()).match(/^A (\d+) o3 j$/)!;
    await sleep(1_500);
    s.write(`K j ${t2}\n`);
    expect(await s.readLine()).toBe(`G ${t2} j`);
    s.write('K j 0\n');
    expect(await s.readLine()).toMatch(/^E bad_request /);
    s.destroy();
  }, 60_000);

  it('leader SIGKILL: holders keep their grants through the failover; no grant to a second holder while one is kept', async () => {
    const group = await nodes({ etcdEndpoints: cluster.endpoints, leaderTtl: '2s', lease: `${LEASE_MS}ms` });
    const leader = await waitForLeader(group.nodes, { timeoutMs: 10_000 });
    const load = keepers(group.addresses);
    await keeping(load);
    const killedAt = performance.now();
    const heldAtKill = load.grants.filter((g) => g.released === undefined);
    await leader.kill('SIGKILL');
    const next = await waitForLeader(group.nodes, { timeoutMs: 10_000, not: leader });
    const servingAfter = performance.now() - killedAt;
    await sleep(LEASE_MS + 1_000);
    const keeps = await judge(load, `leader SIGKILL (new leader serving ${servingAfter.toFixed(0)} ms after)`);
    // Kept by the new leader: a K sent to it after the kill, for a grant the old leader made.
    const across = heldAtKill.filter((g) =>
      g.keeps!.some((k) => k.result === 'kept' && k.sentAt > killedAt && k.to === next.address),
    );
    expect(across.length, 'a grant kept across the failover').toBeGreaterThan(0);
    expect(keeps.some((k) => k.to === next.address && k.result === 'kept')).toBe(true);
  }, 90_000);

  it('leader SIGSTOPped past its TTL: the keeps it reads after SIGCONT get no K; no grant to a second holder', async () => {
    const group = await nodes({ etcdEndpoints: cluster.endpoints, leaderTtl: '1s', lease: `${LEASE_MS}ms` });
    const old = await waitForLeader(group.nodes, { timeoutMs: 10_000 });
    const t1 = (await ask(old.address, 'A pk o1 0')).split(' ')[1]!;
    const raw = await connect(old.address);
    const load = keepers(group.addresses);
    await keeping(load);
    await old.kill('SIGSTOP');
    let next: TicketingNode;
    let newLeaderAt: number;
    try {
      next = await waitForLeader(
        group.nodes.filter((n) => n !== old),
        { timeoutMs: 10_000 },
      );
      newLeaderAt = performance.now();
      // Sent to the stopped leader after another took over: from memory it would be answered K.
      raw.write(`K pk ${t1}\n`);
      await sleep(2_500);
    } finally {
      await old.kill('SIGCONT');
    }
    await raw.waitClosed(5_000);
    const lines = raw.received.toString('latin1').split('\n').filter(Boolean);
    expect(
      lines.filter((l) => /^[KG] /.test(l)),
      `stale replies: ${JSON.stringify(lines)}`,
    ).toEqual([]);
    await sleep(LEASE_MS);
    const keeps = await judge(load, 'leader SIGSTOP past its 1 s TTL');
    const stale = keeps.filter((k) => k.to === old.address && k.sentAt > newLeaderAt);
    figures.push(
      `  keeps sent to the stopped leader after ${next.address} led: ${stale.length}, answered K: ${stale.filter((k) => k.result === 'kept').length}`,
    );
    expect(stale.length, 'keeps sent to the stopped leader after the new one led').toBeGreaterThan(0);
    expect(stale.filter((k) => k.result === 'kept')).toEqual([]);
  }, 90_000);

  it('deposed while the K is in flight: the leader key replaced under a leader whose lease still looks alive gets no K out', async () => {
    // The one case its own lease clock cannot see: its etcd link stalled (so no watch event), its
    // lease confirmed a moment ago, and meanwhile `leader` deleted and taken by another node.
    const routes = await Promise.all(
      cluster.members.map((m) => startTcpProxy('127.0.0.1', Number(m.clientUrl.split(':').pop()))),
    );
    proxies.push(...routes);
    const prefix = `/ticketing-keep-deposed-${Date.now().toString(36)}/`;
    const lease = LEASE_MS;
    const blind = (
      await nodes({
        count: 1,
        prefix,
        etcdEndpoints: routes.map((p) => `http://${p.address}`),
        leaderTtl: '10s',
        lease: `${lease}ms`,
      })
    ).nodes[0]!;
    await waitForLeader([blind], { timeoutMs: 10_000 });
    const others = await nodes({
      count: 2,
      prefix,
      etcdEndpoints: cluster.endpoints,
      leaderTtl: '10s',
      lease: `${lease}ms`,
    });
    const holder = await connect(blind.address);
    holder.write('A dk h 0\n');
    const line = await holder.readLine();
    const token = line.split(' ')[1]!;
    const grant: Grant = { key: 'dk', token: BigInt(token), worker: 0, ackAt: performance.now(), keeps: [] };
    for (const proxy of routes) await proxy.cut({ mode: 'blackhole', existing: 'stall' });
    const { Etcd3 } = await import('etcd3');
    const client = new Etcd3({ hosts: cluster.endpoints });
    try {
      await client.delete().key(`${prefix}leader`);
    } finally {
      client.close();
    }
    const next = await waitForLeader(others.nodes, { timeoutMs: 5_000 });
    // Sent well after the new leader took over (so a stale K would promise past its re-armed
    // lease), to the old one, which still believes it leads.
    await sleep(1_000);
    const keep: Keep = { sentAt: performance.now(), to: blind.address, result: 'pending' };
    grant.keeps!.push(keep);
    holder.write(`K dk ${token}\n`);
    // The new leader re-armed dk at its takeover; a contender gets it a lease later.
    const taken = await askUntil(next.address, 'A dk c 0', /^A /, 10_000);
    const contender: Grant = { key: 'dk', token: BigInt(taken.split(' ')[1]!), worker: 1, ackAt: performance.now() };
    await holder.waitClosed(15_000);
    const heldFor = performance.now() - keep.sentAt;
    const lines = holder.lines.slice(1);
    if (lines.some((l) => /^K /.test(l))) keep.result = 'kept';
    keep.leaseMs = lease;
    figures.push(
      `deposed under a stalled link: the old leader's lines after the K ${JSON.stringify(lines)}, closed ${heldFor.toFixed(0)} ms after it`,
    );
    checkHistory([grant, contender], lease);
    // Taken and held (a refusal by the lease check would have closed at once), then dropped with
    // the term when the lease could no longer be confirmed.
    expect(lines.filter((l) => !l.startsWith('L '))).toEqual(['E not_active leadership lost']);
    expect(heldFor).toBeGreaterThan(500);
    for (const proxy of routes) await proxy.restore();
  }, 90_000);

  it('a leader cut off from etcd answers no K; holders move to the new leader; no grant to a second holder', async () => {
    const routes = await Promise.all(
      cluster.members.map((m) => startTcpProxy('127.0.0.1', Number(m.clientUrl.split(':').pop()))),
    );
    proxies.push(...routes);
    const prefix = `/ticketing-keep-cut-${Date.now().toString(36)}/`;
    const cut = await nodes({
      count: 1,
      prefix,
      etcdEndpoints: routes.map((p) => `http://${p.address}`),
      leaderTtl: '2s',
      lease: `${LEASE_MS}ms`,
    });
    const node = cut.nodes[0]!;
    await waitForLeader([node], { timeoutMs: 10_000 });
    const others = await nodes({
      count: 2,
      prefix,
      etcdEndpoints: cluster.endpoints,
      leaderTtl: '2s',
      lease: `${LEASE_MS}ms`,
    });
    const load = keepers([node.address, ...others.addresses]);
    await keeping(load);
    for (const proxy of routes) await proxy.cut({ mode: 'blackhole', existing: 'stall' });
    const cutAt = performance.now();
    const next = await waitForLeader(others.nodes, { timeoutMs: 10_000 });
    await sleep(LEASE_MS + 1_000);
    const keeps = await judge(load, 'leader cut off from etcd');
    // A K the cut node read after the cut cannot be committed, so it is never answered K.
    const late = keeps.filter((k) => k.to === node.address && k.result === 'kept' && k.sentAt > cutAt);
    expect(late, 'keeps the cut node answered after the cut').toEqual([]);
    expect(keeps.some((k) => k.to === next.address && k.result === 'kept')).toBe(true);
    for (const proxy of routes) await proxy.restore();
  }, 90_000);
});
