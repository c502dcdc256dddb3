// The ticketing benchmark never rots: its quick mode runs here, and every table, workload, system,
// target and output field it promises must be there. The numbers are not judged (a shared CI box
// measures nothing); docs/ticketing-bench.md has a full run's. Needs redis-server and etcd, which
// scripts/setup.sh installs (the cluster bench is skipped without etcd).
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { CLUSTER_DEFAULTS } from '../src/cluster/options.js';
import { findEtcd } from './cluster/harness.mjs';

const run = promisify(execFile);

/**
 * `node bench/ticketing/bench.mjs --quick <args> --out <a temporary directory>`, run once before the
 * enclosing block's tests (bounded by `timeoutMs`): its stdout and the results file it wrote there,
 * read by the tests; the directory is removed after them.
 */
function quickRun<T>(args: string[], resultsFile: string, timeoutMs: number): { results: T; stdout: string } {
  const out = mkdtempSync(join(tmpdir(), 'flocklease-ticketing-bench-'));
  const bench = { results: undefined as T, stdout: '' };
  beforeAll(async () => {
    // --quick first: `args` may override its durations.
    const argv = ['bench/ticketing/bench.mjs', '--quick', ...args, '--out', out];
    try {
      ({ stdout: bench.stdout } = await run(process.execPath, argv, {
        maxBuffer: 16 * 1024 * 1024,
        timeout: timeoutMs,
      }));
    } catch (error) {
      // Its stdout says which of its checks failed (execFile's message has only stderr).
      throw new Error(`${argv.join(' ')} failed; its stdout:\n${(error as { stdout?: string }).stdout ?? ''}`, {
        cause: error,
      });
    }
    bench.results = JSON.parse(readFileSync(join(out, resultsFile), 'utf8')) as T;
  }, timeoutMs + 10_000);
  afterAll(() => rmSync(out, { recursive: true, force: true }));
  return bench;
}

interface ServerCell {
  cyclesPerSecond: number;
  p50Us: number;
  p99Us: number;
  serverUserUsPerCycle: number;
  serverSysUsPerCycle: number;
  clientUsPerCycle: number;
  failures: number;
  ratio?: { cyclesPerSecond: number; serverCpuPerCycle: number; p99: number };
}
interface Results {
  mode: string;
  load: { start: number[]; end: number[] };
  servers: {
    summary: Record<string, Record<string, ServerCell>>;
    targets: Array<{ id: string; measured: number; target: string; met: boolean }>;
    floor: Record<
      string,
      {
        cyclesPerSecond: number;
        serverUsPerCycle: number;
        /** Per Redis system of the workload (`redis`; on the hot key `redis retry` and `redis 1 ms`). */
        vsRedis: Record<string, { cyclesPerSecond: number; serverCpuPerCycle: number }>;
        ticketingVsFloor: { cyclesPerSecond: number; serverCpuPerCycle: number };
      }
    >;
  };
  clients: {
    summary: Record<
      string,
      { ticketing: { cyclesPerSecond: number }; redis: { cyclesPerSecond: number }; ratio: number }
    >;
  };
}

const WORKLOADS = ['distinct 4×1', 'distinct 4×16', 'distinct 4×64', 'distinct 16×64', 'hot 4×16', 'hot 64×1'];
/** The workloads the Node floor (bare-server.mjs) runs in: those with a cycles/s target. */
const FLOOR_WORKLOADS = ['distinct 4×1', 'distinct 4×16', 'distinct 4×64', 'hot 4×16'];
const redisSystems = (workload: string): string[] =>
  workload.startsWith('hot') ? ['redis retry', 'redis 1 ms'] : ['redis'];

describe.runIf(process.platform === 'linux')('npm run bench:ticketing --quick', () => {
  // dist/ is built by `npm test`'s pretest; the bench builds its C load generator itself.
  const bench = quickRun<Results>([], 'results.json', 170_000);

  test('server against server: every workload and system measured, ratios against Ticketing', () => {
    expect(bench.results.mode).toBe('quick');
    expect(bench.results.load.start).toHaveLength(3);
    expect(Object.keys(bench.results.servers.summary)).toEqual(WORKLOADS);
    for (const workload of WORKLOADS) {
      const cell = bench.results.servers.summary[workload]!;
      const systems = ['ticketing', ...redisSystems(workload)];
      if (FLOOR_WORKLOADS.includes(workload)) systems.push('node floor');
      expect(Object.keys(cell).sort(), workload).toEqual(systems.sort());
      for (const [system, m] of Object.entries(cell)) {
        const what = `${workload} ${system}`;
        expect(m.cyclesPerSecond, what).toBeGreaterThan(0);
        expect(m.p99Us, what).toBeGreaterThanOrEqual(m.p50Us);
        for (const v of [m.serverUserUsPerCycle, m.serverSysUsPerCycle, m.clientUsPerCycle]) {
          expect(Number.isFinite(v) && v >= 0, what).toBe(true);
        }
        expect(m.failures, what).toBe(0);
        if (system === 'ticketing') expect(m.ratio).toBeUndefined();
        else expect(m.ratio!.cyclesPerSecond, what).toBeGreaterThan(0);
      }
    }
  });

  test('the Node floor: measured where the cycles/s targets are, against Redis and against Ticketing', () => {
    expect(Object.keys(bench.results.servers.floor)).toEqual(FLOOR_WORKLOADS);
    for (const workload of FLOOR_WORKLOADS) {
      const f = bench.results.servers.floor[workload]!;
      expect(Object.keys(f.vsRedis).sort(), workload).toEqual(redisSystems(workload).sort());
      for (const v of [
        f.cyclesPerSecond,
        f.serverUsPerCycle,
        ...Object.values(f.vsRedis).flatMap((r) => [r.cyclesPerSecond, r.serverCpuPerCycle]),
        f.ticketingVsFloor.cyclesPerSecond,
        f.ticketingVsFloor.serverCpuPerCycle,
      ]) {
        expect(v, workload).toBeGreaterThan(0);
      }
    }
  });

  test('every target has a measured value and a verdict', () => {
    expect(bench.results.servers.targets).toHaveLength(9);
    for (const t of bench.results.servers.targets) {
      expect(Number.isFinite(t.measured), t.id).toBe(true);
      expect(typeof t.met, t.id).toBe('boolean');
    }
  });

  test('client library against client library: both workloads, both systems', () => {
    for (const workload of ['distinct', 'hot']) {
      const s = bench.results.clients.summary[workload]!;
      expect(s.ticketing.cyclesPerSecond, workload).toBeGreaterThan(0);
      expect(s.redis.cyclesPerSecond, workload).toBeGreaterThan(0);
      expect(s.ratio).toBeGreaterThan(0);
    }
  });

  test('prints both tables, each labelled with what it measures', () => {
    expect(bench.stdout).toContain('### Server against server (one C load generator for both');
    expect(bench.stdout).toContain('### Client library against client library (TicketClient vs ioredis');
    for (const workload of WORKLOADS) expect(bench.stdout).toContain(`| ${workload} | ticketing |`);
    for (const workload of FLOOR_WORKLOADS) {
      expect(bench.stdout).toContain(`| ${workload} | node floor |`);
      for (const redis of redisSystems(workload)) {
        expect(bench.stdout).toMatch(
          new RegExp(
            `\\| ${workload} \\| ${redis} \\| [\\d,]+ \\| [\\d.]+× \\| [\\d.]+× \\| ≥ [\\d.]+× Redis \\| (yes|no) \\|`,
          ),
        );
      }
    }
    expect(bench.stdout).toMatch(/\| hot 4×16 vs retry at once p99 \| [\d.]+× \|/);
    expect(bench.stdout).toContain('Fencing check: no overlapping holders');
  });
});

interface TlsCell {
  cyclesPerSecond: { median: number; min: number; max: number };
  serverUsPerCycle: number;
  loadgenUsPerCycle: number;
  failures: number;
  vsPlain?: { cyclesPerSecond: { median: number }; serverUsPerCycle: { median: number } };
}

describe.runIf(process.platform === 'linux')('npm run bench:ticketing -- --tls --quick', () => {
  const SIDES = ['plain', 'TLS', 'mutual TLS'];
  const bench = quickRun<{ negotiation: Record<string, { protocol: string }>; summary: Record<string, TlsCell> }>(
    ['--tls'],
    'tls-results.json',
    110_000,
  );

  test('every side measured over TLS as named, with CPU per cycle and ratios to plain', () => {
    expect(Object.keys(bench.results.summary)).toEqual(SIDES);
    expect(bench.results.negotiation['TLS']!.protocol).toMatch(/^TLSv1\.[23]$/);
    expect(bench.results.negotiation['mutual TLS']!.protocol).toMatch(/^TLSv1\.[23]$/);
    for (const side of SIDES) {
      const cell = bench.results.summary[side]!;
      expect(cell.cyclesPerSecond.median, side).toBeGreaterThan(0);
      expect(cell.serverUsPerCycle, side).toBeGreaterThan(0);
      expect(cell.loadgenUsPerCycle, side).toBeGreaterThan(0);
      expect(cell.failures, side).toBe(0);
      if (side === 'plain') expect(cell.vsPlain).toBeUndefined();
      else {
        expect(cell.vsPlain!.cyclesPerSecond.median, side).toBeGreaterThan(0);
        expect(cell.vsPlain!.serverUsPerCycle.median, side).toBeGreaterThan(0);
      }
    }
    expect(bench.stdout).toContain("### TLS's cost: plain TCP, TLS and mutual TLS, distinct 4×16");
    for (const side of SIDES) expect(bench.stdout).toMatch(new RegExp(`^\\| ${side} \\| [\\d,]+ \\|`, 'm'));
    expect(bench.stdout).toContain('every acquire was granted and every release matched');
  });
});

describe.runIf(process.platform === 'linux')('npm run bench:ticketing -- --acl --quick', () => {
  const SIDES = ['no ACL', 'ACL', 'ACL + quotas'];
  type AclCell = { cyclesPerSecond: number; serverUserUsPerCycle: number; failures: number };
  const bench = quickRun<{ setup: { identities: number; rules: number }; summary: Record<string, AclCell> }>(
    ['--acl'],
    'acl-results.json',
    110_000,
  );

  test('every side measured against 100 identities and 1,000 rules, every cycle granted and released', () => {
    expect(bench.results.setup).toEqual({ identities: 100, rules: 1000 });
    expect(Object.keys(bench.results.summary)).toEqual(SIDES);
    for (const side of SIDES) {
      const cell = bench.results.summary[side]!;
      expect(cell.cyclesPerSecond, side).toBeGreaterThan(0);
      expect(cell.serverUserUsPerCycle, side).toBeGreaterThan(0);
      expect(cell.failures, side).toBe(0);
    }
    for (const side of SIDES)
      expect(bench.stdout).toMatch(new RegExp(`^\\| ${side.replace('+', '\\+')} \\| [\\d,]+ \\|`, 'm'));
    expect(bench.stdout).toContain('every acquire was granted and every release R in every run');
  });
});

interface Spread {
  median: number;
  min: number;
  max: number;
}
interface ObserversResults {
  setup: { observers: number; changesPerSecond: number; observerProcesses: number };
  load: { start: number[]; end: number[] };
  summary: Record<string, Spread | number>;
  memory: Record<string, { rss: number; heapUsed: number; arrayBuffers: number }>;
  runs: Array<{ cpuShare: { server: number; observers: number[]; changer: number } }>;
}

describe.runIf(process.platform === 'linux')('npm run bench:ticketing -- --observers --quick', () => {
  // A 1 s window: enough hand-offs for a figure on a loaded machine.
  const bench = quickRun<ObserversResults>(['--observers', '--duration', '1s'], 'observers-results.json', 50_000);

  test("the delay to the last of 1,000 observers, every process's CPU and the server's memory", () => {
    expect(bench.results.setup).toEqual({ observers: 1000, changesPerSecond: 100, observerProcesses: 1 });
    expect(bench.results.load.start).toHaveLength(3);
    const { summary } = bench.results;
    expect(summary['measuredChanges']).toBeGreaterThan(0);
    expect(summary['skippedRevs']).toBe(0);
    expect(summary['strayLines']).toBe(0);
    for (const figure of [
      'changesPerSecond',
      'lastObserverP50Ms',
      'lastObserverP99Ms',
      'firstObserverP50Ms',
      'handoffP50Ms',
      'serverCpuShare',
      'observersCpuShare',
      'changerCpuShare',
    ]) {
      const s = summary[figure] as Spread;
      for (const v of [s.median, s.min, s.max]) expect(Number.isFinite(v), figure).toBe(true);
    }
    const last = (figure: string): number => (summary[figure] as Spread).median;
    expect(last('lastObserverP99Ms')).toBeGreaterThanOrEqual(last('lastObserverP50Ms'));
    expect(last('serverCpuShare')).toBeGreaterThan(0);
    const [run] = bench.results.runs;
    expect(run!.cpuShare.observers).toHaveLength(1);
    expect(Object.keys(bench.results.memory)).toEqual([
      'idle',
      '1,000 observers, key unchanged',
      'most while the key changes',
    ]);
    for (const m of Object.values(bench.results.memory)) {
      expect(m.rss).toBeGreaterThan(0);
      expect(m.heapUsed).toBeGreaterThan(0);
      expect(m.arrayBuffers).toBeGreaterThan(0);
    }
    expect(bench.stdout).toContain('### Observers: 1,000 observers of one key, a hand-off every 10 ms');
    expect(bench.stdout).toMatch(/^\| delay to the last observer’s `V`, p99 ms \| [\d.]+ \|/m);
    expect(bench.stdout).toMatch(/^\| server CPU \(user \+ sys\) \| [\d.]+ % \|/m);
    expect(bench.stdout).toMatch(/^\| most while the key changes \| [\d.]+ \|/m);
    expect(bench.stdout).toContain('every observer received every rev, in order, and nothing else');
  });
});

interface ClusterCell {
  cyclesPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  cpuPerCycleUs: Record<string, number | null>;
  failures: number;
  overlaps: number;
}
interface Latency {
  count: number;
  p50Ms: number;
  p99Ms: number;
}
type ClusterWorkload = Record<string, ClusterCell> & {
  byWindow: Record<string, { ratioToLock: number; ratioToLockPerRound: number[] }>;
};
interface ClusterResults {
  options: { windows: number[]; quick: boolean };
  etcdData: { dir: string; filesystem: { type: string; source: string; memory: boolean } };
  summary: {
    windows: number[];
    defaultWindow: number;
    distinct: ClusterWorkload;
    hot: ClusterWorkload;
    single: {
      perRound: Array<{
        ticketing: Latency;
        rawTxn: Latency;
        nodeCommit: Latency;
        ratio: number;
        failures: number;
      }>;
      ratio: number;
      ratioPerRound: number[];
    };
    targets: Array<{ id: string; measured: number; goal: string; met: boolean }>;
  };
  floor: {
    rawTxn: Latency;
    walFsync: Record<string, { count: number; meanMs: number; p50AtMostMs: number } | null>;
    fdatasync: Latency;
  };
  failover: { kills: Array<{ ms: number | null }> };
}

const etcd = await findEtcd();

describe.runIf(process.platform === 'linux' && etcd.binary !== undefined)(
  'npm run bench:ticketing -- --cluster --quick --window 1',
  () => {
    // --window 1 and the product default, which the bench always measures too.
    const windows = [...new Set([1, CLUSTER_DEFAULTS.commitWindow])].sort((a, b) => a - b);
    const bench = quickRun<ClusterResults>(['--cluster', '--window', '1'], 'cluster-results.json', 170_000);

    test("the window curve: every window size measured on both workloads, with every process's CPU", () => {
      expect(bench.results.options.quick).toBe(true);
      expect(bench.results.options.windows).toEqual(windows);
      expect(bench.results.summary.defaultWindow).toBe(CLUSTER_DEFAULTS.commitWindow);
      for (const workload of ['distinct', 'hot'] as const) {
        const summary = bench.results.summary[workload];
        for (const system of [...windows.map((w) => `ticketing-w${w}`), 'etcd3-lock', 'etcd-txn']) {
          const cell = summary[system]!;
          const what = `${workload} ${system}`;
          expect(cell.cyclesPerSecond, what).toBeGreaterThan(0);
          expect(cell.p99Ms, what).toBeGreaterThanOrEqual(cell.p50Ms);
          expect(cell.failures + cell.overlaps, what).toBe(0);
          const cpu = Object.keys(cell.cpuPerCycleUs);
          for (const name of ['etcd-m0', 'etcd-m1', 'etcd-m2', 'node-0', 'node-1', 'node-2', 'client']) {
            expect(cpu, what).toContain(name);
          }
          // The other window's group sits idle, and is watched too.
          expect(
            cpu.filter((name) => name.startsWith('idle-w')),
            what,
          ).toHaveLength(3);
        }
        for (const w of windows) {
          const ratio = summary.byWindow[w]!;
          expect(ratio.ratioToLockPerRound, `${workload} ${w}`).toHaveLength(1);
          expect(ratio.ratioToLock, `${workload} ${w}`).toBeGreaterThan(0);
        }
      }
    });

    test('1 worker: Ticketing and the raw txn measured in the same round, and their ratio', () => {
      const { single } = bench.results.summary;
      expect(single.perRound).toHaveLength(1);
      const [round] = single.perRound;
      for (const side of [round!.ticketing, round!.rawTxn]) {
        expect(side.count).toBeGreaterThan(0);
        expect(side.p99Ms).toBeGreaterThanOrEqual(side.p50Ms);
      }
      expect(round!.failures).toBe(0);
      // The leader committed the single loop's grants and releases, and timed them.
      expect(round!.nodeCommit.count).toBeGreaterThan(0);
      expect(round!.nodeCommit.p50Ms).toBeGreaterThan(0);
      expect(round!.ratio).toBeCloseTo(round!.ticketing.p50Ms / round!.rawTxn.p50Ms, 6);
      expect(single.ratio).toBe(round!.ratio);
    });

    test("the floor: raw txn, each member's WAL fsyncs, fdatasync, and where the data dirs are", () => {
      const { floor, etcdData } = bench.results;
      expect(floor.rawTxn.count).toBeGreaterThan(0);
      expect(floor.rawTxn.p50Ms).toBeGreaterThan(0);
      expect(Object.keys(floor.walFsync)).toEqual(['m0', 'm1', 'm2']);
      for (const [member, fsync] of Object.entries(floor.walFsync)) {
        expect(fsync!.count, member).toBeGreaterThan(0);
        expect(fsync!.meanMs, member).toBeGreaterThan(0);
        expect(fsync!.p50AtMostMs, member).toBeGreaterThan(0);
      }
      expect(floor.fdatasync.p50Ms).toBeGreaterThan(0);
      expect(etcdData.filesystem.type).toMatch(/^\w+$/);
      expect(bench.stdout).toContain(`the etcd data dirs are in ${etcdData.dir}, on ${etcdData.filesystem.type}`);
    });

    test('every target has a measured value and a verdict; failover measured', () => {
      expect(bench.results.summary.targets.map((t) => t.id)).toEqual([
        'distinct-ratio',
        'distinct-p99',
        'single-ratio',
        'failover',
      ]);
      for (const t of bench.results.summary.targets) {
        expect(Number.isFinite(t.measured), t.id).toBe(true);
        expect(typeof t.met, t.id).toBe('boolean');
      }
      expect(bench.results.failover.kills).toHaveLength(1);
    });

    test('prints the cycles table, the window curve, the 1-worker table, the floor and the targets', () => {
      for (const w of windows) {
        expect(bench.stdout).toMatch(new RegExp(`^\\| distinct \\| ticketing-w${w} \\| [\\d,]+ \\|`, 'm'));
        const label = w === CLUSTER_DEFAULTS.commitWindow ? `${w} \\(default\\)` : `${w}`;
        expect(bench.stdout).toMatch(
          new RegExp(
            `^\\| ${label} \\| [\\d,]+ \\| [\\d.]+ \\| [\\d.]+ \\| [\\d.]+× \\(.*\\) \\| [\\d.]+ \\| [\\d.]+ / [\\d.]+ \\|`,
            'm',
          ),
        );
      }
      expect(bench.stdout).toContain('### Commit window curve');
      expect(bench.stdout).toMatch(/^\| 1 \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+× \|$/m);
      expect(bench.stdout).toMatch(
        /^\| median \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+× \(rounds /m,
      );
      expect(bench.stdout).toMatch(/WAL fsync .*m0 [\d,]+ fsyncs, mean [\d.]+ ms/);
      expect(bench.stdout).toMatch(
        /^\| 1 worker: acquire \+ release p50 ÷ one raw etcd txn p50 .* \| [\d.]+ \| ≤ 2\.2× \| (yes|no) \|$/m,
      );
      expect(bench.stdout).toContain('Safety check: no overlapping holders');
    });
  },
);
