/**
 * The commit window (cluster/pipeline.ts) on a real 3-member etcd, with 3 `ticketing serve
 * --cluster --commit-window 4 --http …` child processes. Each case first proves the leader's
 * window full at that moment (commits sent with more than 2 in flight, from the leader's
 * `ticketing_etcd_commits_in_flight`, between two scrapes just before the fault), then breaks
 * something, and the history checker must find no double grant, no reordering and no lost
 * acknowledged grant:
 * 1. the leader SIGKILLed: the load goes on at the new leader, tokens rise across the failover;
 * 2. etcd's leader member killed: txns in flight meet etcd's election, grants go on;
 * 3. one key changed by consecutive batches: every key's whole write history, replayed from etcd,
 *    is in token order and holds every acknowledged grant; the hot key's is exactly its grants;
 * 4. a step-down forced mid-window (the leader key deleted in etcd): every A and R the deposed
 *    node wrote is the committed state the next leader serves.
 * Leadership TTL 2 s, grant lease 30 s (nothing expires during a case). The etcd-leader case runs
 * last (it kills a member).
 */
import { Etcd3, type IKeyValue } from 'etcd3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { request, sample } from '../observe/support.js';
import { until } from '../helpers.js';
import {
  findEtcd,
  freePorts,
  startEtcdCluster,
  startTicketingNodes,
  type EtcdCluster,
  type TicketingNodes,
} from './harness.mjs';
import { askUntil, checkHistory, connect, lostGrants, sleep, startLoad, type Grant, type Load } from './support.js';

const etcd = await findEtcd();
if (etcd.reason !== undefined) console.warn(`cluster pipeline tests skipped: ${etcd.reason}`);

const LEASE_MS = 30_000;
/** Many workers over many keys: acquires arrive while the window is full, so it fills. */
const SPREAD = { workers: 32, keys: 512, leaseMs: LEASE_MS };
/** Figures for the report, printed at the end. */
const figures: string[] = [];

interface WindowScrape {
  /** Commits sent. */
  readonly count: number;
  /** Commits sent with at most 2 in flight (themselves included). */
  readonly atMostTwo: number;
}

async function scrapeWindow(port: number): Promise<WindowScrape> {
  const answer = await request(port, '/metrics', { timeoutMs: 2_000 });
  if (answer.status !== 200) throw new Error(`/metrics: HTTP ${answer.status}`);
  const name = 'ticketing_etcd_commits_in_flight';
  return {
    count: sample(answer.body, `${name}_count`) ?? 0,
    atMostTwo: sample(answer.body, `${name}_bucket`, { le: '2' }) ?? 0,
  };
}

/**
 * Proves the leader's window full just now: between two scrapes of its /metrics 300 ms apart, it
 * sent commits with more than 2 in flight (tried again, bounded, until it did). Returns the
 * counts of that last span.
 */
async function windowFull(port: number, timeoutMs = 10_000): Promise<{ commits: number; overTwo: number }> {
  const deadline = Date.now() + timeoutMs;
  let before = await scrapeWindow(port);
  for (;;) {
    await sleep(300);
    const now = await scrapeWindow(port);
    const commits = now.count - before.count;
    const overTwo = commits - (now.atMostTwo - before.atMostTwo);
    if (overTwo > 0) {
      expect(now.atMostTwo, 'ticketing_etcd_commits_in_flight_bucket{le="2"}').toBeLessThan(now.count);
      return { commits, overTwo };
    }
    if (Date.now() >= deadline) throw new Error(`no commit sent with more than 2 in flight within ${timeoutMs} ms`);
    before = now;
  }
}

const describeWindow = ({ commits, overTwo }: { commits: number; overTwo: number }): string =>
  `${overTwo} of ${commits} commits in the 300 ms before sent with >2 in flight`;

const tokenOf = (line: string): bigint => BigInt(line.split(' ')[1]!);

/** No acknowledged grant lost, no key held twice, tokens in grant order. */
function checkAll(grants: readonly Grant[]): void {
  expect(lostGrants(grants), 'a release found its acknowledged grant gone').toEqual([]);
  checkHistory(grants, LEASE_MS);
}

/** `key` granted to `keeper` and held across a fault: returns its token. */
async function holdAcross(address: string, key: string): Promise<bigint> {
  return tokenOf(await askUntil(address, `A ${key} keeper 0`, /^A \d+ keeper /, 5_000));
}

/** After the fault `key` is still held under `token` (T to others, its R succeeds); the next grant
 * of the key has a greater token. */
async function stillHeld(address: string, key: string, token: bigint): Promise<void> {
  expect(await askUntil(address, `A ${key} thief 0`, /^[AT] /, 10_000)).toBe(`T thief ${key}`);
  expect(await askUntil(address, `R ${key} ${token}`, /^[RN] /, 5_000)).toBe(`R ${token} ${key}`);
  const next = tokenOf(await askUntil(address, `A ${key} after 0`, /^A \d+ after /, 5_000));
  expect(next).toBeGreaterThan(token);
}

const maxToken = (grants: readonly Grant[]): bigint => grants.reduce((m, g) => (g.token > m ? g.token : m), 0n);

interface Flips {
  readonly grants: Grant[];
  /** Rounds whose next A was written before the R's reply had come. */
  readonly overlapped: number;
}

/**
 * One connection cycling `key` (nobody else asks for it): A; R of the token, then 1 ms later (the
 * R's reply not yet in) the next A, so the key's next change reaches the leader while its
 * release is being committed, and goes in the next batch that touches the key. After `stopped()`
 * holds, one more round, and it returns holding the key.
 */
async function flipFlop(address: string, key: string, stopped: () => boolean): Promise<Flips> {
  const socket = await connect(address);
  const grants: Grant[] = [];
  let read = 0;
  let overlapped = 0;
  const next = async (): Promise<string> => {
    const line = await socket.readLine(5_000);
    read++;
    return line;
  };
  try {
    let last = stopped();
    socket.write(`A ${key} flipper 0\n`);
    for (;;) {
      const granted = await next();
      expect(granted).toMatch(new RegExp(`^A \\d+ flipper ${key}$`));
      const grant: Grant = { key, token: tokenOf(granted), worker: -1, ackAt: performance.now() };
      grants.push(grant);
      if (last) return { grants, overlapped };
      last = stopped();
      grant.releaseSentAt = performance.now();
      socket.write(`R ${key} ${grant.token}\n`);
      await sleep(1);
      if (socket.lines.length === read) overlapped++;
      socket.write(`A ${key} flipper 0\n`);
      expect(await next()).toBe(`R ${grant.token} ${key}`);
      grant.released = 'released';
    }
  } finally {
    socket.destroy();
  }
}

interface Written {
  readonly type: 'put' | 'delete';
  /** The grant's token (puts). */
  readonly token: bigint | undefined;
  readonly revision: string;
}

interface StreamResult {
  /** Every line the node wrote. */
  readonly lines: string[];
  /** Requests written that had no answer when the connection closed. */
  readonly unanswered: number;
  /** Keys whose R was written. */
  readonly releasing: Set<string>;
}

/**
 * A raw connection to `address` writing a request every 3 ms until the node closes it (bounded):
 * the A of a fresh key `stream-<s>-<i>` (never otherwise released), every third one the R of a
 * key it was granted instead.
 */
async function stream(address: string, s: number): Promise<StreamResult> {
  const socket = await connect(address);
  try {
    const granted: Array<[string, string]> = [];
    const releasing = new Set<string>();
    let parsed = 0;
    let sent = 0;
    const deadline = Date.now() + 15_000;
    for (let i = 0; !socket.closed && Date.now() < deadline; i++) {
      for (; parsed < socket.lines.length; parsed++) {
        const match = /^A (\d+) p (\S+)$/.exec(socket.lines[parsed]!);
        if (match !== null) granted.push([match[2]!, match[1]!]);
      }
      // Every third request releases the oldest grant, but never the last: some stay held.
      const release = i % 3 === 2 && granted.length > 1 ? granted.shift() : undefined;
      if (release !== undefined) releasing.add(release[0]);
      socket.write(release !== undefined ? `R ${release[0]} ${release[1]}\n` : `A stream-${s}-${i} p 0\n`);
      sent++;
      await sleep(3);
    }
    await socket.waitClosed(5_000).catch(() => {});
    expect(socket.closed, `stream ${s}: the node never closed it`).toBe(true);
    const lines = [...socket.lines];
    return { lines, unanswered: sent - lines.filter((l) => /^[ARNTB] /.test(l)).length, releasing };
  } finally {
    socket.destroy();
  }
}

/** The reasons of the node's step-downs, from its log. */
function stepDowns(stderr: string): string[] {
  const reasons: string[] = [];
  for (const line of stderr.split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      const entry = JSON.parse(line) as { msg: string; reason?: string; err?: { message?: string } };
      if (entry.msg === 'stepped down')
        reasons.push(`${entry.reason}${entry.err?.message ? ` (${entry.err.message})` : ''}`);
    } catch {
      // a line cut by the 16 KiB tail
    }
  }
  return reasons;
}

const errorsOf = (load: Load): string => JSON.stringify(Object.fromEntries(load.errors));

describe.skipIf(etcd.reason !== undefined)('the commit window on a real etcd', () => {
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
    if (figures.length > 0) console.log(`pipeline figures:\n  ${figures.join('\n  ')}`);
  }, 60_000);

  async function startNodes(): Promise<{ group: TicketingNodes; http: number[] }> {
    const http = await freePorts(3);
    const group = await startTicketingNodes({
      etcdEndpoints: cluster.endpoints,
      leaderTtl: '2s',
      lease: '30s',
      extraArgs: ['--commit-window', '4'],
      nodeArgs: http.map((port) => ['--http', `127.0.0.1:${port}`]),
    });
    groups.push(group);
    return { group, http };
  }

  async function withEtcd<T>(use: (client: Etcd3) => Promise<T>): Promise<T> {
    const client = new Etcd3({ hosts: cluster.endpoints });
    try {
      return await use(client);
    } finally {
      client.close();
    }
  }

  /**
   * Every write etcd applied under `prefix`keys/, replayed by a watch from revision 1, by key, in
   * revision order: up to `lastRevision`, the newest write there.
   */
  function writesUnder(prefix: string, lastRevision: string): Promise<Map<string, Written[]>> {
    return withEtcd(async (client) => {
      const byKey = new Map<string, Written[]>();
      const keys = `${prefix}keys/`;
      const watcher = client.watch().prefix(keys).startRevision('1').watcher();
      try {
        await new Promise<void>((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error(`etcd history not replayed within 10 s`)), 10_000);
          const add = (type: 'put' | 'delete') => (kv: IKeyValue) => {
            const key = kv.key.toString('latin1').slice(keys.length);
            // `r<rev> <token> <owner>` (cluster/store.ts)
            const token = type === 'put' ? BigInt(kv.value.toString('latin1').split(' ')[1]!) : undefined;
            let list = byKey.get(key);
            if (list === undefined) byKey.set(key, (list = []));
            list.push({ type, token, revision: kv.mod_revision });
            if (kv.mod_revision === lastRevision) {
              clearTimeout(timer);
              resolve();
            }
          };
          watcher.on('put', add('put'));
          watcher.on('delete', add('delete'));
          watcher.on('error', reject);
        });
      } finally {
        await watcher.cancel().catch(() => {});
      }
      return byKey;
    });
  }

  it('the leader SIGKILLed with a full window: the new leader carries on, tokens rise across; nothing lost, doubled or reordered', async () => {
    const { group, http } = await startNodes();
    const leader = await group.waitForLeader({ timeoutMs: 15_000 });
    const held = await holdAcross(leader.address, 'across');
    const load = startLoad(group.addresses, SPREAD);
    let killedAt = 0;
    let fromNew = 0;
    try {
      const full = await windowFull(http[leader.index]!);
      killedAt = performance.now();
      await leader.kill('SIGKILL');
      const next = await group.waitForLeader({ not: leader, timeoutMs: 15_000 });
      // (replies the old leader wrote before it died were read while the new one was found)
      fromNew = performance.now();
      await until(() => load.grants.some((g) => g.ackAt > fromNew), 'a grant from the new leader', 10_000);
      const first = load.grants.find((g) => g.ackAt > fromNew)!;
      await sleep(1_000);
      await stillHeld(next.address, 'across', held);
      figures.push(
        `leader SIGKILL: ${describeWindow(full)}; new leader serving ${(fromNew - killedAt).toFixed(0)} ms after the kill, ` +
          `its first grant ${(first.ackAt - killedAt).toFixed(0)} ms after`,
      );
    } finally {
      await load.stop();
    }
    const before = load.grants.filter((g) => g.ackAt < killedAt);
    const after = load.grants.filter((g) => g.ackAt > fromNew);
    expect(before.length).toBeGreaterThan(0);
    expect(after.length).toBeGreaterThan(0);
    // The new leader starts above the old one's reservation in hwm, so above every token it acknowledged.
    const lowestAfter = after.reduce((m, g) => (g.token < m ? g.token : m), after[0]!.token);
    expect(lowestAfter).toBeGreaterThan(maxToken(before));
    checkAll(load.grants);
    figures.push(`  ${load.grants.length} grants (${after.length} by the new leader); errors ${errorsOf(load)}`);
  }, 60_000);

  it('one key changed by consecutive batches with a full window: etcd has every key written in token order, the last write standing', async () => {
    const { group, http } = await startNodes();
    const leader = await group.waitForLeader({ timeoutMs: 15_000 });
    const load = startLoad(group.addresses, { ...SPREAD, workers: 24 });
    const queued = startLoad(group.addresses, { workers: 8, keys: 1, leaseMs: LEASE_MS, keyPrefix: 'queued-' });
    let loadsStopped = false;
    const flipping = flipFlop(leader.address, 'hot', () => loadsStopped);
    flipping.catch(() => {}); // (awaited below)
    let full;
    try {
      full = await windowFull(http[leader.index]!);
      await sleep(2_000);
    } finally {
      await Promise.all([load.stop(), queued.stop()]);
      loadsStopped = true;
    }
    const flips = await flipping;
    const grants = [...load.grants, ...queued.grants, ...flips.grants];
    checkAll(grants);
    // The hot key is held under its last grant; that put is the newest write under keys/ (the
    // loads had stopped before its A was sent).
    const last = flips.grants.at(-1)!;
    const stored = await withEtcd((client) =>
      client.kv.range({ key: Buffer.from(`${group.prefix}keys/hot`, 'latin1') }),
    );
    expect(stored.kvs[0]?.value.toString('latin1')).toMatch(new RegExp(`^r[0-9]+ ${last.token} flipper$`));
    const writes = await writesUnder(group.prefix, stored.kvs[0]!.mod_revision);
    const puts = (key: string): bigint[] =>
      (writes.get(key) ?? []).filter((w) => w.type === 'put').map((w) => w.token!);
    for (const key of writes.keys()) {
      const tokens = puts(key);
      for (let i = 1; i < tokens.length; i++)
        expect(tokens[i], `${key}: token ${tokens[i]} written after token ${tokens[i - 1]}`).toBeGreaterThan(
          tokens[i - 1]!,
        );
    }
    // Every acknowledged grant was written; each key's last write is its last acknowledged state.
    const byKey = new Map<string, Grant[]>();
    for (const g of grants) {
      const list = byKey.get(g.key);
      if (list === undefined) byKey.set(g.key, [g]);
      else list.push(g);
    }
    for (const [key, list] of byKey) {
      const written = new Set(puts(key));
      for (const g of list)
        expect(written.has(g.token), `${key}: acknowledged token ${g.token} never written`).toBe(true);
      const lastGrant = list.reduce((a, b) => (b.token > a.token ? b : a));
      const lastWrite = writes.get(key)!.at(-1)!;
      if (lastGrant.released === undefined) expect(lastWrite).toMatchObject({ type: 'put', token: lastGrant.token });
      else if (lastGrant.released === 'released')
        expect(lastWrite.type, `${key}: stored after its release`).toBe('delete');
    }
    // The hot key: written exactly its acknowledged grants, in order.
    expect(puts('hot')).toEqual(flips.grants.map((g) => g.token));
    const apart = writes.get('hot')!.filter((w) => w.type === 'delete').length;
    expect(flips.overlapped).toBeGreaterThan(0);
    figures.push(
      `hot key: ${describeWindow(full)}; ${flips.grants.length} grants of the hot key, ${flips.overlapped} next A written before ` +
        `the R's reply, ${apart} releases committed apart from the next grant; queued key ${queued.grants.length} grants, ` +
        `${load.grants.length} others; errors ${errorsOf(load)} ${errorsOf(queued)}`,
    );
  }, 60_000);

  it('a step-down in the middle of a full window (leader key deleted): every A and R the deposed node wrote was committed', async () => {
    const { group, http } = await startNodes();
    const leader = await group.waitForLeader({ timeoutMs: 15_000 });
    const load = startLoad(group.addresses, SPREAD);
    let results: StreamResult[];
    let next;
    try {
      const streams = [0, 1, 2].map((s) => stream(leader.address, s));
      for (const s of streams) s.catch(() => {}); // (awaited below)
      const full = await windowFull(http[leader.index]!);
      const deletedAt = performance.now();
      await withEtcd((client) => client.delete().key(`${group.prefix}leader`).exec());
      results = await Promise.all(streams);
      await until(() => stepDowns(leader.stderr).length > 0, 'the deposed node logging its step-down', 5_000);
      next = await group.waitForLeader({ timeoutMs: 15_000 });
      const servingAt = performance.now();
      await until(() => load.grants.some((g) => g.ackAt > servingAt), 'a grant after the step-down', 10_000);
      await sleep(500);
      figures.push(
        `step-down: ${describeWindow(full)}; deposed: ${stepDowns(leader.stderr).join('; ')}; ` +
          `${results.map((r) => r.unanswered).join('+')} requests on the raw connections left unanswered; ` +
          `next leader ${next === leader ? 'the same node' : 'another node'}, serving ${(servingAt - deletedAt).toFixed(0)} ms after the delete`,
      );
    } finally {
      await load.stop();
    }
    const lines = results.flatMap((r) => r.lines);
    const answers = /^(A \d+ p stream-\d+-\d+|R \d+ stream-\d+-\d+|E (not_active|no_leader)( .*)?|[LM] \S+)$/;
    expect(lines.filter((l) => !answers.test(l))).toEqual([]);
    // Every A the deposed node wrote is held under its token at the next leader (unless its R
    // was sent); every R it wrote left the key free there.
    const releasing = new Set(results.flatMap((r) => [...r.releasing]));
    const held = lines.filter((l) => l.startsWith('A ') && !releasing.has(l.split(' ')[3]!));
    const freed = lines.filter((l) => l.startsWith('R '));
    expect(held.length).toBeGreaterThan(0);
    const check = await connect(next.address);
    try {
      check.write(
        held.map((l) => `R ${l.split(' ')[3]} ${l.split(' ')[1]}\n`).join('') +
          freed.map((l) => `A ${l.split(' ')[2]} checker 0\n`).join(''),
      );
      const replies = await check.readLines(held.length + freed.length, 10_000);
      expect(replies.slice(0, held.length)).toEqual(held.map((l) => `R ${l.split(' ')[1]} ${l.split(' ')[3]}`));
      for (const [i, l] of freed.entries())
        expect(replies[held.length + i]).toMatch(new RegExp(`^A \\d+ checker ${l.split(' ')[2]}$`));
    } finally {
      check.destroy();
    }
    checkAll(load.grants);
    figures.push(
      `  ${held.length} A and ${freed.length} R from the raw connections checked; ${load.grants.length} grants; errors ${errorsOf(load)}`,
    );
  }, 60_000);

  it('etcd loses its leader member with a full window: grants go on; nothing lost, doubled or reordered', async () => {
    const { group, http } = await startNodes();
    const leader = await group.waitForLeader({ timeoutMs: 15_000 });
    const held = await holdAcross(leader.address, 'across');
    const load = startLoad(group.addresses, SPREAD);
    let old = -1;
    try {
      const etcdLeader = await cluster.leaderIndex();
      expect(etcdLeader).toBeGreaterThanOrEqual(0);
      const full = await windowFull(http[leader.index]!);
      const killedAt = performance.now();
      old = etcdLeader;
      await cluster.kill(old);
      await cluster.waitForLeader({ not: old, timeoutMs: 10_000 });
      const electedAt = performance.now();
      await until(() => load.grants.some((g) => g.ackAt > electedAt), 'a grant after etcd elected a leader', 15_000);
      const first = load.grants.find((g) => g.ackAt > electedAt)!;
      await sleep(1_000);
      const current = await group.waitForLeader({ timeoutMs: 15_000 });
      await stillHeld(current.address, 'across', held);
      figures.push(
        `etcd leader killed: ${describeWindow(full)}; etcd elected after ${(electedAt - killedAt).toFixed(0)} ms, first grant ` +
          `${(first.ackAt - killedAt).toFixed(0)} ms after the kill; Ticketing leader now ${current === leader ? 'the same node' : 'another node'}; ` +
          `step-downs: ${JSON.stringify(group.nodes.flatMap((n) => stepDowns(n.stderr)))}`,
      );
    } finally {
      await load.stop();
      if (old >= 0) {
        await cluster.restart(old);
        await cluster.waitHealthy();
      }
    }
    checkAll(load.grants);
    figures.push(`  ${load.grants.length} grants; errors ${errorsOf(load)}`);
  }, 60_000);
});
