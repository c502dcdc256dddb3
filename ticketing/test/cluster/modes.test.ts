/**
 * Modes in cluster mode on a real etcd (3 members on loopback, 3 Ticketing nodes as child
 * processes): shared and semaphore keys are committed with every holder, rebuilt by a new leader
 * after a leader SIGKILL, and the mode history checker (support.ts `checkModeHistory`) holds over
 * a load of all three modes across the kills.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  findEtcd,
  startEtcdCluster,
  startTicketingNodes,
  waitForLeader,
  type EtcdCluster,
  type TicketingNodes,
} from './harness.mjs';
import { ask, askUntil, checkModeHistory, connect, lostGrants, sleep, startLoad, type Grant } from './support.js';

const etcd = await findEtcd();
if (etcd.reason !== undefined) console.warn(`cluster modes tests skipped: ${etcd.reason}`);

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
  }, 60_000);

  it('leader SIGKILL under a load of x, s and N: holders rebuilt with their slots, never more than N, no slot twice, no s beside x, tokens rise', async () => {
    const leaseMs = 30_000;
    const group = await startTicketingNodes({ etcdEndpoints: cluster.endpoints, leaderTtl: '2s', lease: '30s' });
    groups.push(group);
    // sem-* keys: 3 permits; rw-*: mostly shared, every fifth cycle exclusive.
    const modeOf = (key: string, n: number): 'x' | 's' | number =>
      key.startsWith('sem') ? 3 : n % 5 === 0 ? 'x' : 's';
    const sem = startLoad(group.addresses, { workers: 6, keys: 2, leaseMs, keyPrefix: 'sem-', modeOf });
    const rw = startLoad(group.addresses, { workers: 6, keys: 2, leaseMs, keyPrefix: 'rw-', modeOf });
    try {
      for (let round = 0; round < 2; round++) {
        const leader = await waitForLeader(group.nodes, { timeoutMs: 15_000 });
        // Held across the kill: two permits of a semaphore and two shared holds.
        const s = await connect(leader.address);
        const key = `held-sem-${round}`;
        s.write(`A ${key} a 0 4\nA ${key} b 0 4\nA held-rw-${round} r1 0 s\nA held-rw-${round} r2 0 s\n`);
        const lines = await s.readLines(4, 10_000);
        s.destroy();
        expect(lines[0]).toMatch(new RegExp(`^A \\d+ a ${key} 0$`));
        expect(lines[1]).toMatch(new RegExp(`^A \\d+ b ${key} 1$`));
        const tokens = lines.map((line) => BigInt(line.split(' ')[1]!));
        await sleep(300);
        await leader.kill('SIGKILL');
        const next = await waitForLeader(group.nodes, { timeoutMs: 10_000, not: leader });
        // The new leader rebuilt both keys: their kinds, holders and slots.
        expect(await askUntil(next.address, `A ${key} c 0 4`, /^A /, 5_000)).toMatch(new RegExp(`^A \\d+ c ${key} 2$`));
        expect(await ask(next.address, `A ${key} d 0 3`)).toBe(`C d ${key}`);
        expect(await ask(next.address, `A held-rw-${round} w 0`)).toBe(`T w held-rw-${round}`);
        expect(await ask(next.address, `A held-rw-${round} r3 0 s`)).toMatch(/^A \d+ r3 /);
        // The held grants are released by their exact tokens at the new leader.
        expect(await ask(next.address, `R ${key} ${tokens[1]}`)).toBe(`R ${tokens[1]} ${key}`);
        const reused = await ask(next.address, `A ${key} e 0 4`);
        expect(reused).toMatch(new RegExp(`^A \\d+ e ${key} 1$`)); // b's slot, with a greater token
        expect(BigInt(reused.split(' ')[1]!)).toBeGreaterThan(tokens[1]!);
        expect(await ask(next.address, `R held-rw-${round} ${tokens[2]}`)).toBe(`R ${tokens[2]} held-rw-${round}`);
        await leader.restart();
      }
    } finally {
      await Promise.all([sem.stop(), rw.stop()]);
    }
    const all = [...sem.grants, ...rw.grants];
    expect(sem.grants.length).toBeGreaterThan(20);
    expect(rw.grants.filter((g) => g.mode === 's').length).toBeGreaterThan(10);
    expect(rw.grants.filter((g) => g.mode === 'x').length).toBeGreaterThan(0);
    expect(lostGrants(all), 'a release found its grant gone').toEqual([]);
    checkModeHistory(all, leaseMs);
  }, 180_000);
});
