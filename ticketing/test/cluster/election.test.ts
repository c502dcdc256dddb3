/**
 * Leader election in cluster mode on a real etcd (3 members on loopback, 3 Ticketing nodes as child
 * processes): a `P` is answered only once committed; observers (election-clients.ts) find the
 * leader by themselves and re-observe there after a leader SIGKILL or a SIGSTOP past the leadership
 * TTL; a resumed leader pushes nothing to its old observers and closes them; and the observation
 * checker (support.ts `checkObservations`) holds over a load of grants and publishes across each
 * fault. Leadership TTL 2 s, grant lease 5 s.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { until } from '../helpers.js';
import { Observer, Publisher } from './election-clients.js';
import {
  findEtcd,
  probeNode,
  startEtcdCluster,
  startTicketingNodes,
  waitForLeader,
  type EtcdCluster,
  type TicketingNode,
  type TicketingNodes,
} from './harness.mjs';
import {
  ask,
  askUntil,
  checkHistory,
  checkObservations,
  connect,
  lostGrants,
  sleep,
  startLoad,
  type Grant,
  type Load,
  type Observation,
  type Publish,
} from './support.js';

const etcd = await findEtcd();
if (etcd.reason !== undefined) console.warn(`cluster election tests skipped: ${etcd.reason}`);

const LEASE_MS = 5_000;
const figures: string[] = [];

describe('the observation checker', () => {
  const grant = (token: bigint, ackAt: number, releasedAt: number, values: string[] = []): Grant => ({
    key: 'k',
    token,
    worker: 0,
    ackAt,
    owner: `o${token}`,
    released: 'released',
    releaseSentAt: releasedAt - 5,
    releasedAt,
    publishes: values.map((value) => ({ value, sentAt: ackAt + 1, result: 'published' })),
  });
  const history = [grant(10n, 100, 200, ['a', 'b']), grant(20n, 300, 400)];
  const v = (rev: number, at: number, token?: bigint, value?: string, since = 0, observer = 0): Observation => ({
    observer,
    key: 'k',
    rev: BigInt(rev),
    holder: token === undefined ? undefined : { token, owner: `o${token}`, value },
    at,
    since,
  });
  const good = [v(5, 50), v(10, 110, 10n), v(11, 120, 10n, 'a'), v(12, 130, 10n, 'b'), v(13, 250), v(20, 310, 20n)];

  it('accepts every state in order, a stream that missed some, and an uncertain holder without a value', () => {
    checkObservations(good, history, new Set(), 1_000);
    checkObservations([v(5, 50), v(12, 130, 10n, 'b'), v(20, 310, 20n)], history, new Set(), 1_000);
    const uncertain = { ...v(30, 500, 30n), holder: { token: 30n, owner: 'w', value: undefined } };
    checkObservations([...good, uncertain], history, new Set(['k w']), 1_000);
  });

  it.each([
    ['a rev that falls', [v(10, 110, 10n), v(5, 120)], /rev fell/],
    ['one rev naming two states', [v(10, 110, 10n), v(10, 120, 10n, 'a', 0, 1)], /another state/],
    ['a holder no acquire made', [v(30, 500, 30n)], /no acquire could have made/],
    ['a value never published', [v(10, 110, 10n, 'z')], /never published/],
    ['a vacancy while held throughout', [v(15, 180, undefined, undefined, 150)], /vacant/],
    ['a holder shown after its release was acknowledged', [v(12, 260, 10n, 'b', 250)], /released/],
    ['an older holder after a newer one', [v(20, 310, 20n), v(21, 320, 10n, 'b')], /after the stream showed/],
    ['a holder again after a vacancy', [v(11, 120, 10n, 'a'), v(12, 150), v(13, 160, 10n, 'a')], /after the stream/],
    ['a value going back', [v(12, 130, 10n, 'b'), v(13, 140, 10n, 'a')], /went back/],
  ])('finds %s', (_, observed, message) => {
    expect(() => checkObservations(observed, history, new Set(), 1_000)).toThrow(message);
  });
});

/** A `V` line's rev, token, owner and value (token undefined: vacant). */
function parseV(line: string): { key: string; rev: bigint; token?: string; owner?: string; value?: string } {
  const [, key, rev, token, owner, ...value] = line.split(' ');
  if (token === '-') return { key: key!, rev: BigInt(rev!) };
  return { key: key!, rev: BigInt(rev!), token, owner, value: value.length > 0 ? value.join(' ') : undefined };
}

/** Polls `condition` every 50 ms (light beside the load), bounded by `ms`. */
async function poll(condition: () => boolean, what: string, ms: number): Promise<void> {
  const deadline = performance.now() + ms;
  while (!condition()) {
    if (performance.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(50);
  }
}

/** Grants `key` to `owner` at the leader `address`, recorded as the checker reads grants. */
async function take(address: string, key: string, owner: string): Promise<Grant> {
  const reply = await ask(address, `A ${key} ${owner} 0`, 10_000);
  expect(reply).toMatch(new RegExp(`^A \\d+ ${owner} ${key}$`));
  return { key, token: BigInt(reply.split(' ')[1]!), worker: 0, ackAt: performance.now(), owner };
}

async function publishAt(address: string, grant: Grant, value: string): Promise<void> {
  const sent: Publish = { value, sentAt: performance.now(), result: 'pending' };
  (grant.publishes ??= []).push(sent);
  expect(await ask(address, `P ${grant.key} ${grant.token} ${value}`, 10_000)).toBe(`P ${grant.token} ${grant.key}`);
  sent.result = 'published';
}

async function releaseAt(address: string, grant: Grant): Promise<void> {
  grant.releaseSentAt = performance.now();
  expect(await ask(address, `R ${grant.key} ${grant.token}`, 10_000)).toBe(`R ${grant.token} ${grant.key}`);
  grant.released = 'released';
  grant.releasedAt = performance.now();
}

describe.skipIf(etcd.reason !== undefined)('observers on a real etcd', () => {
  let cluster: EtcdCluster;
  const groups: TicketingNodes[] = [];
  const observers: Observer[] = [];

  beforeAll(async () => {
    cluster = await startEtcdCluster({ members: 3 });
  }, 60_000);
  afterEach(async () => {
    await Promise.all(observers.splice(0).map((o) => o.stop()));
    await Promise.all(groups.splice(0).map((group) => group.stop(2_000).catch(() => {})));
  }, 30_000);
  afterAll(async () => {
    await cluster?.stop();
    if (figures.length > 0) console.log(`cluster election figures:\n  ${figures.join('\n  ')}`);
  }, 60_000);

  async function startNodes(): Promise<TicketingNodes> {
    const group = await startTicketingNodes({
      etcdEndpoints: cluster.endpoints,
      leaderTtl: '2s',
      lease: `${LEASE_MS}ms`,
    });
    groups.push(group);
    return group;
  }

  function observe(group: TicketingNodes, count: number, keys: string[], sink: Observation[]): Observer[] {
    const started = Array.from({ length: count }, (_, i) => new Observer(i, group.addresses, keys, sink));
    observers.push(...started);
    return started;
  }

  it('a P is answered only once committed: the leader SIGKILLed right after 20 P replies, the new leader shows every holder and value at a rev no lower', async () => {
    const group = await startNodes();
    const leader = await waitForLeader(group.nodes, { timeoutMs: 15_000 });
    const keys = Array.from({ length: 20 }, (_, i) => `pub-${i}`);
    const watcher = await connect(leader.address);
    const s = await connect(leader.address);
    let replies: string[];
    let settled: ReturnType<typeof parseV>;
    try {
      // One key published, and its V seen, before the rest: nothing changes it after.
      watcher.write('O pub-settled\n');
      expect(await watcher.readLine(10_000)).toMatch(/^V pub-settled \d+ -$/);
      s.write('A pub-settled boss 0\n');
      const settledToken = (await s.readLine(10_000)).split(' ')[1]!;
      s.write(`P pub-settled ${settledToken} here\n`);
      expect(await s.readLine(10_000)).toBe(`P ${settledToken} pub-settled`);
      expect(await watcher.readLine(10_000)).toMatch(new RegExp(`^V pub-settled \\d+ ${settledToken} boss$`));
      settled = parseV(await watcher.readLine(10_000));
      expect(settled).toMatchObject({ token: settledToken, value: 'here' });
      watcher.write(keys.map((key) => `O ${key}\n`).join(''));
      expect((await watcher.readLines(keys.length, 10_000)).every((line) => / -$/.test(line))).toBe(true);
      s.write(keys.map((key) => `A ${key} boss 0\n`).join(''));
      const tokens = (await s.readLines(keys.length, 10_000)).map((line, i) => {
        expect(line).toMatch(new RegExp(`^A \\d+ boss ${keys[i]}$`));
        return line.split(' ')[1]!;
      });
      s.write(keys.map((key, i) => `P ${key} ${tokens[i]} 10.0.0.${i}:8080 serves ${key}\n`).join(''));
      replies = await s.readLines(keys.length, 10_000);
      await leader.kill('SIGKILL');
      expect(replies).toEqual(keys.map((key, i) => `P ${tokens[i]} ${key}`));
    } finally {
      s.destroy();
      watcher.destroy();
    }
    // What the old leader's observer saw last of each key.
    const views = watcher.lines.filter((l) => l.startsWith('V ')).map(parseV);
    const before = new Map(views.map((view) => [view.key, view]));
    const next = await waitForLeader(group.nodes, { timeoutMs: 15_000, not: leader });
    const o = await connect(next.address);
    try {
      o.write(['pub-settled', ...keys].map((key) => `O ${key}\n`).join(''));
      const [again, ...after] = (await o.readLines(keys.length + 1, 10_000)).map(parseV);
      // Nothing changed it since its publish: the new leader serves it at the same rev.
      expect(again).toEqual(settled);
      for (const [i, view] of after.entries()) {
        const key = keys[i]!;
        expect(view).toMatchObject({ key, token: replies[i]!.split(' ')[1], owner: 'boss' });
        expect(view.value).toBe(`10.0.0.${i}:8080 serves ${key}`);
        const last = before.get(key)!;
        expect(view.rev).toBeGreaterThanOrEqual(last.rev);
        if (last.value !== undefined) expect(view.rev, `${key}: the rev of its publish`).toBe(last.rev);
      }
      const seen = keys.filter((key) => before.get(key)?.value !== undefined).length;
      figures.push(`P then SIGKILL: 20 values kept; the old leader's observer had got ${seen} of their 20 V's`);
    } finally {
      o.destroy();
    }
  }, 60_000);

  it('observers re-observe on each new leader across a leader SIGKILL and a SIGSTOP past the TTL; the resumed leader pushes nothing stale and closes its observers', async () => {
    const group = await startNodes();
    const first = await waitForLeader(group.nodes, { timeoutMs: 15_000 });
    const keys = ['ek-a', 'ek-b'];
    const sink: Observation[] = [];
    const watching = observe(group, 3, keys, sink);
    /** Every observer showed `key` held by `grant` with `value`, on a connection to `node`. */
    const shown = (node: TicketingNode, grant: Grant, value: string): boolean =>
      watching.every((o) => {
        const since = o.connections.findLast((c) => c.address === node.address)?.since;
        return sink.some(
          (v) =>
            v.observer === o.id &&
            v.since === since &&
            v.key === grant.key &&
            v.holder?.token === grant.token &&
            v.holder.value === value,
        );
      });
    const ga = await take(first.address, 'ek-a', 'one');
    await publishAt(first.address, ga, 'at 1 on the first');
    const gb = await take(first.address, 'ek-b', 'one');
    await releaseAt(first.address, gb);
    await poll(() => shown(first, ga, 'at 1 on the first'), 'every observer showing the first value', 10_000);

    const killedAt = performance.now();
    await first.kill('SIGKILL');
    const second = await waitForLeader(group.nodes, { timeoutMs: 15_000, not: first });
    await poll(
      () => shown(second, ga, 'at 1 on the first'),
      'every observer re-observing on the second leader',
      15_000,
    );
    const movedAfterKill = performance.now() - killedAt;
    await publishAt(second.address, ga, 'at 2 on the second');
    await releaseAt(second.address, ga);
    const gc = await take(second.address, 'ek-a', 'two');
    await publishAt(second.address, gc, 'at 3');
    await poll(() => shown(second, gc, 'at 3'), 'every observer showing the new holder', 10_000);

    // An observer of the leader about to pause that never leaves it: it must get nothing stale.
    const stale = await connect(second.address);
    stale.write('O ek-a\nO ek-b\n');
    expect(await stale.readLines(2, 10_000)).toEqual([
      expect.stringMatching(new RegExp(`^V ek-a \\d+ ${gc.token} two at 3$`)),
      expect.stringMatching(/^V ek-b \d+ -$/),
    ]);
    const stoppedAt = performance.now();
    await second.kill('SIGSTOP');
    let third: TicketingNode;
    let gd: Grant;
    let resumedAt: number;
    let linesAtResume: number;
    try {
      third = await waitForLeader(
        group.nodes.filter((n) => n !== second && n !== first),
        { timeoutMs: 15_000 },
      );
      // Read by the paused leader only after SIGCONT: from its stale state it would answer them.
      stale.write(`O ek-c\nP ek-a ${gc.token} stale\nR ek-a ${gc.token}\n`);
      await poll(() => shown(third, gc, 'at 3'), 'every observer re-observing on the third leader', 15_000);
      await releaseAt(third.address, gc);
      gd = await take(third.address, 'ek-a', 'three');
      await publishAt(third.address, gd, 'at 4 on the third');
      await poll(() => shown(third, gd, 'at 4 on the third'), 'every observer showing the third holder', 10_000);
    } finally {
      linesAtResume = stale.lines.length;
      await second.kill('SIGCONT');
      resumedAt = performance.now();
    }
    expect(resumedAt - stoppedAt, 'paused past its 2 s leadership TTL').toBeGreaterThan(2_000);
    await stale.waitClosed(10_000);
    const afterResume = stale.lines.slice(linesAtResume);
    expect(
      afterResume.filter((line) => !/^(?:E not_active|L) /.test(line)),
      `after the resume: ${JSON.stringify(afterResume)}`,
    ).toEqual([]);
    expect(stale.lines.slice(0, linesAtResume).filter((line) => line.startsWith('V '))).toHaveLength(2);
    await until(async () => (await probeNode(second.address)).role !== 'leader', 'the resumed node not leading', 5_000);
    expect(await askUntil(third.address, 'W', /^W$/, 5_000)).toBe('W');

    await Promise.all(watching.map((o) => o.stop()));
    for (const o of watching) {
      expect(o.connections.map((c) => c.address).slice(-1)).toEqual([third.address]);
      expect(new Set(o.connections.map((c) => c.address)).size, 'three leaders observed').toBe(3);
      expect(
        o.others.filter((line) => !line.startsWith('E not_active')),
        'lines other than V',
      ).toEqual([]);
    }
    checkObservations(sink, [ga, gb, gc, gd], new Set(), LEASE_MS);
    figures.push(
      `observers: on the new leader ${movedAfterKill.toFixed(0)} ms after a leader SIGKILL; ` +
        `the leader paused ${(resumedAt - stoppedAt).toFixed(0)} ms, resumed, closed its observer with ${JSON.stringify(afterResume)}`,
    );
  }, 90_000);

  /** A load of 6 workers on 3 keys, each publishing twice while it holds, watched by 4 observers;
   * `fault` breaks the leader and resolves when (bounded) another serves. Then: the history and
   * observation checkers. */
  async function underLoad(fault: (leader: TicketingNode, group: TicketingNodes) => Promise<number>): Promise<string> {
    const group = await startNodes();
    const leader = await waitForLeader(group.nodes, { timeoutMs: 15_000 });
    const keys = ['obs-0', 'obs-1', 'obs-2'];
    const sink: Observation[] = [];
    const watching = observe(group, 4, keys, sink);
    const publishers = Array.from({ length: 6 }, () => new Publisher(group.addresses));
    const load: Load = startLoad(group.addresses, {
      workers: 6,
      keys: keys.length,
      leaseMs: LEASE_MS,
      keyPrefix: 'obs-',
      whileHeld: async (grant) => {
        for (const n of [1, 2]) {
          const result = await publishers[grant.worker]!.publish(grant, `${grant.token}.${n} from w${grant.worker}`);
          if (result !== 'published') return;
        }
        await sleep(5);
      },
    });
    let faultAt = 0;
    let servingAt = 0;
    const valuesAfter = (at: number): number => sink.filter((v) => v.at > at && v.holder?.value !== undefined).length;
    try {
      await poll(() => load.grants.length > 40 && valuesAfter(0) > 40, 'grants and values before the fault', 20_000);
      faultAt = performance.now();
      servingAt = await fault(leader, group);
      // Each observer back on a leader and shown a value there, and the load granting again.
      await poll(
        () =>
          load.grants.filter((g) => g.ackAt > servingAt).length > 40 &&
          watching.every((o) =>
            sink.some((v) => v.observer === o.id && v.since > faultAt && v.holder?.value !== undefined),
          ),
        'grants and observed values after the fault',
        20_000,
      );
    } finally {
      await load.stop();
      for (const publisher of publishers) publisher.stop();
    }
    await sleep(200); // the last V's
    await Promise.all(watching.map((o) => o.stop()));
    checkHistory(load.grants, LEASE_MS);
    expect(lostGrants(load.grants), 'a release found its grant gone').toEqual([]);
    checkObservations(sink, load.grants, load.uncertain, LEASE_MS);
    for (const o of watching) expect(o.connections.length, `observer ${o.id} re-observed`).toBeGreaterThanOrEqual(2);
    const publishes = load.grants.flatMap((g) => g.publishes ?? []);
    const published = publishes.filter((p) => p.result === 'published');
    expect(published.filter((p) => p.sentAt > servingAt).length, 'values published after the fault').toBeGreaterThan(0);
    const reobserved = watching.map((o) => (o.connections.find((c) => c.since > faultAt)!.since - faultAt).toFixed(0));
    return (
      `${load.grants.length} grants, ${published.length}/${publishes.length} P published, ${sink.length} V's to 4 observers ` +
      `(re-observed ${reobserved.join(', ')} ms after the fault), ${load.uncertain.size} acquires Indeterminate; ` +
      `errors ${JSON.stringify(Object.fromEntries(load.errors))}`
    );
  }

  it('under a load of grants and publishes, across a leader SIGKILL: the revs of every observer rise, it shows only committed states, never a stale holder', async () => {
    const summary = await underLoad(async (leader, group) => {
      await leader.kill('SIGKILL');
      await waitForLeader(group.nodes, { timeoutMs: 15_000, not: leader });
      return performance.now();
    });
    figures.push(`load, leader SIGKILL: ${summary}`);
  }, 90_000);

  it('under a load of grants and publishes, across a leader SIGSTOP past its TTL: the same, and the resumed leader steps down', async () => {
    let pausedMs = 0;
    const summary = await underLoad(async (leader, group) => {
      const stoppedAt = performance.now();
      await leader.kill('SIGSTOP');
      let servingAt: number;
      try {
        await waitForLeader(
          group.nodes.filter((n) => n !== leader),
          { timeoutMs: 15_000 },
        );
        servingAt = performance.now();
        await sleep(1_500); // the new leader serves while the old one is still paused
      } finally {
        await leader.kill('SIGCONT');
        pausedMs = performance.now() - stoppedAt;
      }
      await until(
        async () => (await probeNode(leader.address)).role !== 'leader',
        'the resumed node not leading',
        5_000,
      );
      return servingAt;
    });
    expect(pausedMs, 'paused past its 2 s leadership TTL').toBeGreaterThan(2_000);
    figures.push(`load, leader SIGSTOP for ${pausedMs.toFixed(0)} ms: ${summary}`);
  }, 90_000);
});
