/**
 * Modes in cluster mode on a real etcd (3 members on loopback, 3 Ticketing nodes as child
 * processes): shared and semaphore keys are committed with every holder, and the mode history
 * checker (support.ts `checkModeHistory`) holds over a load of all three modes across each fault:
 * 1. the leader SIGKILLed (twice): a new leader rebuilds every key with its holders and slots;
 * 2. the leader SIGSTOPped past its leadership TTL, then resumed: another node leads meanwhile,
 *    the resumed one steps down and grants nothing from its stale state;
 * 3. etcd's leader member killed (then restarted): etcd elects another, grants go on.
 * Each case proves its fault happened and the load made progress after it. Leadership TTL 2 s
 * (1 s for the pause), grant lease 5 s (a new leader restarts every lease, so the grants held
 * across a fault are checked right after it). The etcd-leader case runs last (it kills a member).
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { until } from '../helpers.js';
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
  checkModeHistory,
  connect,
  lostGrants,
  sleep,
  startLoad,
  type Grant,
  type Load,
} from './support.js';

const etcd = await findEtcd();
if (etcd.reason !== undefined) console.warn(`cluster modes tests skipped: ${etcd.reason}`);

/** Short, so a grant whose acquire was Indeterminate (committed, its reply lost with the leader)
 * frees its permit or key within the bounded waits for progress; the holders release in 5 ms. */
const LEASE_MS = 5_000;
const figures: string[] = [];

describe('the mode history checker', () => {
  const grant = (token: bigint, ackAt: number, mode: Grant['mode'], more: Partial<Grant> = {}): Grant => ({
    key: 'k',
    token,
    worker: 0,
    ackAt,
    mode,
    released: 'released',
    releaseSentAt: ackAt + 100,
    ...more,
  });

  it('accepts overlapping shared grants and N permits on distinct slots', () => {
    checkModeHistory([grant(1n, 0, 's'), grant(2n, 10, 's'), grant(3n, 200, 'x')], 1_000);
    checkModeHistory(
      [grant(1n, 0, 2, { slot: 0 }), grant(2n, 10, 2, { slot: 1 }), grant(3n, 150, 2, { slot: 0 })],
      1_000,
    );
  });

  it.each([
    ['a shared grant overlapping an exclusive one', [grant(1n, 0, 'x'), grant(2n, 50, 's')], /overlaps/],
    ['an exclusive grant overlapping a shared one', [grant(1n, 0, 's'), grant(2n, 50, 'x')], /overlaps/],
    [
      'more than N holders',
      [grant(1n, 0, 2, { slot: 0 }), grant(2n, 10, 2, { slot: 1 }), grant(3n, 20, 2, { slot: 0 })],
      /permits still held/,
    ],
    ['one slot held twice', [grant(1n, 0, 3, { slot: 1 }), grant(2n, 10, 3, { slot: 1 })], /slot 1 still held/],
    ['a token issued twice', [grant(1n, 0, 's'), grant(1n, 500, 's')], /issued twice/],
  ])('finds %s', (_, history, message) => {
    expect(() => checkModeHistory(history, 1_000)).toThrow(message);
  });
});

/** The load of all three modes: sem-* keys take 3 permits; rw-* keys mostly shared, every fifth
 * cycle exclusive. */
interface ModeLoad {
  readonly sem: Load;
  readonly rw: Load;
  /** Every grant either saw so far. */
  grants(): Grant[];
  stop(): Promise<void>;
}

function startModeLoad(addresses: readonly string[]): ModeLoad {
  const modeOf = (key: string, n: number): 'x' | 's' | number => (key.startsWith('sem') ? 3 : n % 5 === 0 ? 'x' : 's');
  const sem = startLoad(addresses, { workers: 6, keys: 2, leaseMs: LEASE_MS, keyPrefix: 'sem-', modeOf });
  const rw = startLoad(addresses, { workers: 6, keys: 2, leaseMs: LEASE_MS, keyPrefix: 'rw-', modeOf });
  return {
    sem,
    rw,
    grants: () => [...sem.grants, ...rw.grants],
    async stop() {
      await Promise.all([sem.stop(), rw.stop()]);
    },
  };
}

/** Waits (bounded) until both halves of the load were granted something after `at`. */
function progressAfter(load: ModeLoad, at: number, what: string, timeoutMs = 10_000): Promise<void> {
  const after = (l: Load): boolean => l.grants.some((g) => g.ackAt > at);
  return until(() => after(load.sem) && after(load.rw), `semaphore and shared/exclusive grants ${what}`, timeoutMs);
}

/** What the checker needs to judge: more than 20 permits, 10 shared and 1 exclusive grants. */
const enough = (load: ModeLoad): boolean =>
  load.sem.grants.length > 20 &&
  load.rw.grants.filter((g) => g.mode === 's').length > 10 &&
  load.rw.grants.some((g) => g.mode === 'x');

/** Lets the load run on (bounded) until it is `enough`. */
const runUntilEnough = (load: ModeLoad): Promise<void> =>
  until(() => enough(load), 'more than 20 permits, 10 shared and 1 exclusive grants', 10_000);

/** Runs the checks over the whole history of the stopped load; it must have gone on after `at`
 * (the fault). Returns a summary for the figures. */
function judge(load: ModeLoad, at: number): string {
  const all = load.grants();
  expect(load.sem.grants.length).toBeGreaterThan(20);
  expect(load.rw.grants.filter((g) => g.mode === 's').length).toBeGreaterThan(10);
  expect(load.rw.grants.filter((g) => g.mode === 'x').length).toBeGreaterThan(0);
  const after = all.filter((g) => g.ackAt > at);
  expect(after.filter((g) => typeof g.mode === 'number').length, 'permits granted after the fault').toBeGreaterThan(0);
  expect(after.filter((g) => g.mode === 's').length, 'shared grants after the fault').toBeGreaterThan(0);
  expect(lostGrants(all), 'a release found its grant gone').toEqual([]);
  checkModeHistory(all, LEASE_MS);
  const errors = JSON.stringify(Object.fromEntries([...load.sem.errors, ...load.rw.errors]));
  return `${all.length} grants (${after.length} after the fault); errors ${errors}`;
}

const tokenOf = (line: string): bigint => BigInt(line.split(' ')[1]!);

/** Held across a fault, granted at the leader `address`: two permits of a semaphore of 4
 * (`held-sem-<tag>`, slots 0 and 1) and two shared holds (`held-rw-<tag>`). Their tokens. */
async function holdAcross(address: string, tag: string): Promise<bigint[]> {
  const key = `held-sem-${tag}`;
  const s = await connect(address);
  let lines;
  try {
    s.write(`A ${key} a 0 4\nA ${key} b 0 4\nA held-rw-${tag} r1 0 s\nA held-rw-${tag} r2 0 s\n`);
    lines = await s.readLines(4, 10_000);
  } finally {
    s.destroy();
  }
  expect(lines[0]).toMatch(new RegExp(`^A \\d+ a ${key} 0$`));
  expect(lines[1]).toMatch(new RegExp(`^A \\d+ b ${key} 1$`));
  expect(lines[2]).toMatch(new RegExp(`^A \\d+ r1 held-rw-${tag}$`));
  expect(lines[3]).toMatch(new RegExp(`^A \\d+ r2 held-rw-${tag}$`));
  return lines.map(tokenOf);
}

/** After the fault the leader at `address` has both keys of `holdAcross` with their kinds,
 * holders and slots, and releases them by their exact tokens; a freed slot is reused with a
 * greater token. */
async function checkHeldAcross(address: string, tag: string, tokens: readonly bigint[]): Promise<void> {
  const key = `held-sem-${tag}`;
  const rw = `held-rw-${tag}`;
  expect(await askUntil(address, `A ${key} c 0 4`, /^A /, 5_000)).toMatch(new RegExp(`^A \\d+ c ${key} 2$`));
  expect(await ask(address, `A ${key} d 0 3`)).toBe(`C d ${key}`);
  expect(await ask(address, `A ${rw} w 0`)).toBe(`T w ${rw}`);
  expect(await ask(address, `A ${rw} r3 0 s`)).toMatch(new RegExp(`^A \\d+ r3 ${rw}$`));
  expect(await ask(address, `R ${key} ${tokens[1]}`)).toBe(`R ${tokens[1]} ${key}`);
  const reused = await ask(address, `A ${key} e 0 4`);
  expect(reused).toMatch(new RegExp(`^A \\d+ e ${key} 1$`)); // b's slot, with a greater token
  expect(tokenOf(reused)).toBeGreaterThan(tokens[1]!);
  expect(await ask(address, `R ${rw} ${tokens[2]}`)).toBe(`R ${tokens[2]} ${rw}`);
}

/** The reasons of the step-downs the node logged at or after `since` (wall clock, ms). */
function stepDownsSince(stderr: string, since: number): string[] {
  const reasons: string[] = [];
  for (const line of stderr.split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      const entry = JSON.parse(line) as { msg: string; time: string; reason?: string };
      if (entry.msg === 'stepped down' && Date.parse(entry.time) >= since) reasons.push(String(entry.reason));
    } catch {
      // a line cut by the 16 KiB tail
    }
  }
  return reasons;
}

describe.skipIf(etcd.reason !== undefined)('modes on a real etcd', () => {
  let cluster: EtcdCluster;
  const groups: TicketingNodes[] = [];

  beforeAll(async () => {
    cluster = await startEtcdCluster({ members: 3 });
  }, 60_000);
  afterEach(async () => {
    await Promise.all(groups.splice(0).map((group) => group.stop(2_000).catch(() => {})));
  }, 30_000);
  afterAll(async () => {
    await cluster?.stop();
    if (figures.length > 0) console.log(`cluster modes figures:\n  ${figures.join('\n  ')}`);
  }, 60_000);

  async function startNodes(leaderTtl: string): Promise<TicketingNodes> {
    const group = await startTicketingNodes({ etcdEndpoints: cluster.endpoints, leaderTtl, lease: `${LEASE_MS}ms` });
    groups.push(group);
    return group;
  }

  it('leader SIGKILL under a load of x, s and N: holders rebuilt with their slots, never more than N, no slot twice, no s beside x, tokens rise', async () => {
    const group = await startNodes('2s');
    const load = startModeLoad(group.addresses);
    let killedAt = 0;
    try {
      for (let round = 0; round < 2; round++) {
        const leader = await waitForLeader(group.nodes, { timeoutMs: 15_000 });
        const tokens = await holdAcross(leader.address, `kill-${round}`);
        await sleep(300);
        killedAt = performance.now();
        await leader.kill('SIGKILL');
        const next = await waitForLeader(group.nodes, { timeoutMs: 10_000, not: leader });
        await checkHeldAcross(next.address, `kill-${round}`, tokens);
        await progressAfter(load, killedAt, 'from the new leader');
        await leader.restart();
      }
    } finally {
      await load.stop();
    }
    figures.push(`leader SIGKILL ×2: ${judge(load, killedAt)}`);
  }, 180_000);

  it('leader SIGSTOPped past its TTL under a load of x, s and N: another leads, the resumed one steps down and grants nothing stale; the checker holds', async () => {
    const group = await startNodes('1s');
    const load = startModeLoad(group.addresses);
    let resumedAt: number;
    try {
      const old = await waitForLeader(group.nodes, { timeoutMs: 15_000 });
      const tokens = await holdAcross(old.address, 'stop');
      await progressAfter(load, performance.now(), 'before the pause');
      const raw = await connect(old.address);
      const stoppedAt = performance.now();
      await old.kill('SIGSTOP');
      let next: TicketingNode;
      let resumedWall = 0;
      let ledAt = 0;
      try {
        next = await waitForLeader(
          group.nodes.filter((n) => n !== old),
          { timeoutMs: 10_000 },
        );
        // Read by the paused node only after SIGCONT: from its stale state it would grant them.
        raw.write(`A held-sem-stop z 0 4\nA stale-sem z 0 3\nA stale-rw z 0 s\n`);
        await checkHeldAcross(next.address, 'stop', tokens);
        // Paused on while the new leader grants (clients that followed the old one reach it only
        // after two response timeouts), bounded: the checker judges those grants too.
        ledAt = performance.now();
        await progressAfter(load, ledAt, 'while paused', 6_000).catch(() => {});
      } finally {
        resumedWall = Date.now();
        await old.kill('SIGCONT');
        resumedAt = performance.now();
      }
      const pausedMs = resumedAt - stoppedAt;
      expect(pausedMs, 'paused past its 1 s leadership TTL').toBeGreaterThan(1_000);
      await raw.waitClosed(5_000).catch(() => {});
      raw.destroy();
      expect(
        raw.lines.filter((l) => /^[ACT] /.test(l)),
        `stale replies: ${JSON.stringify(raw.lines)}`,
      ).toEqual([]);
      await until(
        () => stepDownsSince(old.stderr, resumedWall).length > 0,
        'the resumed node logging its step-down',
        5_000,
      );
      expect((await probeNode(old.address)).role).not.toBe('leader');
      await progressAfter(load, resumedAt, 'after the resume', 15_000);
      await runUntilEnough(load);
      const whilePaused = load.grants().filter((g) => g.ackAt > ledAt && g.ackAt < resumedAt).length;
      figures.push(
        `leader SIGSTOP for ${pausedMs.toFixed(0)} ms (leader TTL 1 s), ${whilePaused} grants by the new leader meanwhile; resumed, it stepped down: ` +
          `${stepDownsSince(old.stderr, resumedWall).join('; ')}`,
      );
    } finally {
      await load.stop();
    }
    figures.push(`  ${judge(load, resumedAt)}`);
  }, 60_000);

  it('etcd loses its leader member under a load of x, s and N: etcd elects another, holders kept, grants go on; the checker holds', async () => {
    const group = await startNodes('2s');
    const load = startModeLoad(group.addresses);
    let old = -1;
    let electedAt: number;
    try {
      const leader = await waitForLeader(group.nodes, { timeoutMs: 15_000 });
      const tokens = await holdAcross(leader.address, 'etcd');
      await progressAfter(load, performance.now(), 'before the kill');
      const etcdLeader = await cluster.leaderIndex();
      expect(etcdLeader, 'an etcd leader').toBeGreaterThanOrEqual(0);
      const killedAt = performance.now();
      old = etcdLeader;
      await cluster.kill(old);
      const elected = await cluster.waitForLeader({ not: old, timeoutMs: 10_000 });
      expect(elected).not.toBe(old);
      electedAt = performance.now();
      const current = await waitForLeader(group.nodes, { timeoutMs: 15_000 });
      await checkHeldAcross(current.address, 'etcd', tokens);
      await progressAfter(load, electedAt, 'after etcd elected another leader', 15_000);
      await runUntilEnough(load);
      figures.push(
        `etcd leader member ${old} killed: member ${elected} elected ${(electedAt - killedAt).toFixed(0)} ms after; ` +
          `Ticketing leader now ${current === leader ? 'the same node' : 'another node'}`,
      );
    } finally {
      await load.stop();
      if (old >= 0) {
        await cluster.restart(old);
        await cluster.waitHealthy();
      }
    }
    figures.push(`  ${judge(load, electedAt)}`);
  }, 60_000);
});
