/**
 * The cluster benchmark's (cluster.mjs) figures beyond the lock cycles, and its report: etcd's
 * counters, the 1-worker figure against one raw etcd txn, the floor, the tables (cycles, commit
 * window curve, 1 worker, floor, targets) and cluster-results.json.
 *
 * - The 1-worker figure: one loop alternates one Ticketing acquire+release and one raw etcd txn
 *   (a guarded put like Ticketing's group commit: compare a guard key's create revision, put one
 *   key; the `etcd3` client over all three endpoints, as the nodes use it, so either may land on a
 *   follower that forwards it; made by the nodes' own createEtcdClient), which goes first
 *   alternating too, so both see the same moment. A cycle is two commits in a row, so its p50 is
 *   about 2× the txn's at best. Beside them, the leader's own commit time in that window (from
 *   the commit probe): what one of those two commits took as Ticketing saw it.
 * - The floor, measured once with etcd otherwise idle: one raw txn at a time, each member's WAL
 *   fsync time over that window (etcd_disk_wal_fsync_duration_seconds: mean from sum and count;
 *   p50 and p99 only as the bound of their bucket, 1, 2, 4 … ms), and Node's own 4 KiB write +
 *   fdatasync on the filesystem the etcd data dirs are on (which one, disk or tmpfs, is read from
 *   /proc/self/mountinfo): the fsync's p50 at a finer grain than etcd's buckets.
 */
import { closeSync, fdatasyncSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { ETCD_ELECTION_MS, ETCD_HEARTBEAT_MS, ROOT } from '../../ticketing/test/cluster/harness.mjs';

const now = () => performance.timeOrigin + performance.now(); // epoch ms, comparable across processes
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
export const fixed = (n, digits = 2) => (Number.isFinite(n) ? n.toFixed(digits) : '–');
export const fmt = (n) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '–');
const median = (values) => {
  const sorted = values.filter(Number.isFinite).sort((a, b) => a - b);
  return sorted.length ? sorted[Math.floor((sorted.length - 1) / 2)] : NaN;
};

/** p50, p99 and p99.9 of the first `count` samples of `samples` (sorted in place). */
export function latencyOf(samples, count) {
  const sorted = samples.subarray(0, count).sort();
  const at = (q) => (count ? sorted[Math.min(count - 1, Math.ceil(count * q) - 1)] : NaN);
  return { count, p50Ms: at(0.5), p99Ms: at(0.99), p999Ms: at(0.999) };
}

// ---------------------------------------------------------------------------------------------
// etcd counters

const COUNTERS = {
  proposals: 'etcd_server_proposals_committed_total', // one per write txn, lease grant or revoke
  puts: 'etcd_mvcc_put_total',
  deletes: 'etcd_mvcc_delete_total',
  walFsyncs: 'etcd_disk_wal_fsync_duration_seconds_count',
  walFsyncSeconds: 'etcd_disk_wal_fsync_duration_seconds_sum',
};
const FSYNC_BUCKET = /^etcd_disk_wal_fsync_duration_seconds_bucket\{le="([^"]+)"\} (\S+)$/gm;

/** COUNTERS from one member's /metrics, and its WAL fsync histogram (`walFsyncBuckets`, le → count). */
export async function etcdCounters(endpoint) {
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const text = await (await fetch(`${endpoint}/metrics`, { signal: AbortSignal.timeout(5_000) })).text();
      const values = {};
      for (const [name, metric] of Object.entries(COUNTERS)) {
        const match = new RegExp(`^${metric} (\\S+)$`, 'm').exec(text);
        values[name] = match ? Number(match[1]) : NaN;
      }
      values.walFsyncBuckets = Object.fromEntries([...text.matchAll(FSYNC_BUCKET)].map((m) => [m[1], Number(m[2])]));
      return values;
    } catch {
      // a starved member may be slow to answer: try again (bounded)
    }
  }
  return undefined;
}

/** after − before for every counter (NaN when either sample is missing). */
export function counterDelta(before, after) {
  const delta = {};
  for (const name of Object.keys(COUNTERS)) delta[name] = (after?.[name] ?? NaN) - (before?.[name] ?? NaN);
  return delta;
}

/**
 * The WAL fsyncs between two samples of one member: count, mean (sum ÷ count), and the upper
 * bound of the histogram bucket (1, 2, 4 … ms) that holds the p50 and the p99: etcd's buckets say
 * no more than that (interpolating inside the first one would only restate its bounds).
 */
function walFsync(before, after) {
  const count = after.walFsyncs - before.walFsyncs;
  const bounds = Object.keys(after.walFsyncBuckets)
    .filter((le) => le !== '+Inf')
    .map(Number)
    .sort((a, b) => a - b);
  const cumulative = (le) => after.walFsyncBuckets[String(le)] - (before.walFsyncBuckets[String(le)] ?? 0);
  const bucketOf = (q) => (count > 0 ? (bounds.find((le) => cumulative(le) >= q * count) ?? Infinity) * 1000 : NaN);
  return {
    count,
    meanMs: count > 0 ? ((after.walFsyncSeconds - before.walFsyncSeconds) * 1000) / count : NaN,
    p50AtMostMs: bucketOf(0.5),
    p99AtMostMs: bucketOf(0.99),
    underOneMs: count > 0 ? cumulative(0.001) / count : NaN,
    proposals: after.proposals - before.proposals,
  };
}

// ---------------------------------------------------------------------------------------------
// The nodes' commit probe (commit-probe.mjs)

/** The batch-size counters each node's commit probe wrote, summed over `nodePids`. */
export function commitStats(statsDir, nodePids) {
  const total = { batches: 0, txns: 0, writes: 0, replies: 0, writesHistogram: {}, commitTenthsMs: {} };
  for (const pid of nodePids) {
    let stats;
    try {
      stats = JSON.parse(readFileSync(join(statsDir, `${pid}.json`), 'utf8'));
    } catch {
      continue; // no batch committed by this node yet
    }
    for (const name of ['batches', 'txns', 'writes', 'replies']) total[name] += stats[name];
    for (const histogram of ['writesHistogram', 'commitTenthsMs']) {
      for (const [bin, n] of Object.entries(stats[histogram] ?? {}))
        total[histogram][bin] = (total[histogram][bin] ?? 0) + n;
    }
  }
  return total;
}

/** The `q` quantile of what a histogram (bin → count) counted between two samples of it. */
function binAt(before, after, q, total) {
  const bins = Object.keys(after)
    .map(Number)
    .sort((a, b) => a - b);
  let seen = 0;
  for (const bin of bins) {
    seen += after[bin] - (before[bin] ?? 0);
    if (seen >= Math.ceil(total * q)) return bin;
  }
  return bins.at(-1);
}

/**
 * Batches committed between two commitStats() samples: count, mean and percentiles of their size,
 * and of their commit time as the node saw it (one etcd txn's round trip, from inside Ticketing).
 */
export function batchSizes(before, after) {
  const batches = after.batches - before.batches;
  if (batches <= 0) return null;
  const at = (q) => binAt(before.writesHistogram, after.writesHistogram, q, batches);
  const commitMs = (q) => binAt(before.commitTenthsMs, after.commitTenthsMs, q, batches) / 10;
  return {
    batches,
    txns: after.txns - before.txns,
    meanWrites: (after.writes - before.writes) / batches,
    meanReplies: (after.replies - before.replies) / batches,
    p50Writes: at(0.5),
    p99Writes: at(0.99),
    maxWrites: Object.keys(after.writesHistogram)
      .map(Number)
      .filter((s) => after.writesHistogram[s] > (before.writesHistogram[s] ?? 0))
      .sort((a, b) => a - b)
      .at(-1),
    commitP50Ms: commitMs(0.5),
    commitP99Ms: commitMs(0.99),
  };
}

// ---------------------------------------------------------------------------------------------
// One raw etcd txn, as Ticketing's group commit sends it

async function rawTxnClient(endpoints, prefix) {
  // The nodes' own etcd client (node.ts #start's settings): the txn pays what Ticketing's pays.
  const { createEtcdClient } = await import(join(ROOT, 'ticketing', 'dist', 'cluster', 'etcd.js'));
  const client = await createEtcdClient({ hosts: endpoints, callTimeoutMs: 1_000, hostCooldownMs: 1_000 });
  const guard = Buffer.from(`${prefix}:guard`);
  await client.put(guard).value('guard').exec();
  const createRevision = (await client.get(guard).exec()).kvs[0].create_revision;
  const compare = [{ key: guard, target: 'Create', result: 'Equal', create_revision: createRevision }];
  const put = { request_put: { key: Buffer.from(`${prefix}:raw`), value: Buffer.from('4611686018427387904 owner') } };
  return {
    async txn() {
      const result = await client.kv.txn({ compare, success: [put] });
      if (!result.succeeded) throw new Error('raw txn: the guard failed');
    },
    close: () => client.close(),
  };
}

/**
 * The 1-worker figure: `lock` (cluster.mjs's Ticketing system) and the raw txn alternate in one
 * loop for `durationMs` after `warmupMs`; `sample` reads every process's CPU, as for a workload.
 */
export async function runSingle(config, lock, sample) {
  const raw = await rawTxnClient(config.endpoints, config.prefix);
  const cycles = new Float64Array(1_000_000);
  const txns = new Float64Array(1_000_000);
  let [nCycles, nTxns, measuring, stop, errors, failures, generation] = [0, 0, false, false, 0, 0, 0];
  const cycle = async () => {
    const key = `${config.prefix}:single:${generation}`;
    const started = now();
    const token = await lock.acquire(0, key);
    if (token === undefined) return void failures++;
    if (!(await lock.release(0, key, token))) failures++;
    if (measuring && nCycles < cycles.length) cycles[nCycles++] = now() - started;
  };
  const txn = async () => {
    const started = now();
    await raw.txn();
    if (measuring && nTxns < txns.length) txns[nTxns++] = now() - started;
  };
  const loop = async () => {
    for (let i = 0; !stop; i++) {
      for (const step of i % 2 ? [txn, cycle] : [cycle, txn]) {
        try {
          await step();
        } catch (error) {
          errors++;
          generation++; // an Indeterminate outcome may leave the key held: move on
          if (errors <= 3) console.error(`ticketing/single: ${error.message}`);
          await sleep(10);
        }
      }
    }
  };
  const running = loop();
  await sleep(config.warmupMs);
  const before = await sample();
  measuring = true;
  await sleep(config.durationMs);
  measuring = false;
  const after = await sample();
  stop = true;
  await running;
  await raw.close();
  const iterations = Math.min(nCycles, nTxns);
  const cpuPerIterationUs = {};
  for (const name of Object.keys(config.pids)) {
    const used = after.cpu[name] - before.cpu[name];
    cpuPerIterationUs[name] = iterations && Number.isFinite(used) ? (used * 1000) / iterations : null;
  }
  const clientUs = after.client.user + after.client.system - before.client.user - before.client.system;
  cpuPerIterationUs.client = iterations ? clientUs / iterations : null;
  const ticketing = latencyOf(cycles, nCycles);
  const rawTxn = latencyOf(txns, nTxns);
  const batches = batchSizes(before.commits, after.commits);
  return {
    system: 'ticketing',
    workload: 'single',
    ticketing,
    rawTxn,
    // The leader's own commits in that window (commit-probe.mjs): one etcd txn as the node saw it.
    nodeCommit: {
      count: batches?.batches ?? 0,
      p50Ms: batches?.commitP50Ms ?? NaN,
      p99Ms: batches?.commitP99Ms ?? NaN,
    },
    ratio: ticketing.p50Ms / rawTxn.p50Ms,
    cpuPerIterationUs,
    errors,
    failures,
    overlaps: 0,
  };
}

// ---------------------------------------------------------------------------------------------
// The floor

/** Node's own write of 4 KiB + fdatasync, sequential, in `dir` (etcd's WAL does this per commit). */
function fdatasyncProbe(dir, durationMs) {
  const file = join(dir, 'fdatasync-probe');
  const fd = openSync(file, 'w');
  const block = Buffer.alloc(4096, 1);
  const samples = new Float64Array(200_000);
  let n = 0;
  try {
    for (const end = now() + durationMs; now() < end && n < samples.length;) {
      const started = now();
      writeSync(fd, block, 0, block.length, (n % 16_384) * block.length);
      fdatasyncSync(fd);
      samples[n++] = now() - started;
    }
  } finally {
    closeSync(fd);
    rmSync(file, { force: true });
  }
  return latencyOf(samples, n);
}

/** Child process: the floor (see the file comment). */
export async function runFloor({ endpoints, prefix, warmupMs, durationMs, etcdDir, memberNames }) {
  const raw = await rawTxnClient(endpoints, prefix);
  for (const end = now() + warmupMs; now() < end;) await raw.txn();
  const samples = new Float64Array(1_000_000);
  let n = 0;
  const before = await Promise.all(endpoints.map(etcdCounters));
  for (const end = now() + durationMs; now() < end && n < samples.length;) {
    const started = now();
    await raw.txn();
    samples[n++] = now() - started;
  }
  const after = await Promise.all(endpoints.map(etcdCounters));
  await raw.close();
  const members = {};
  endpoints.forEach((_, i) => (members[memberNames[i]] = before[i] && after[i] ? walFsync(before[i], after[i]) : null));
  return { rawTxn: latencyOf(samples, n), walFsync: members, fdatasync: fdatasyncProbe(etcdDir, durationMs) };
}

/** The mount `path` lives on (longest mount point that prefixes it): mount point, type, source. */
export function filesystemOf(path) {
  let best;
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    // id parent major:minor root mountpoint options [optional fields] - type source superoptions
    const [left, right] = line.split(' - ');
    if (!right) continue;
    const mountPoint = left.split(' ')[4].replace(/\\040/g, ' ');
    const inside = path === mountPoint || path.startsWith(mountPoint.endsWith('/') ? mountPoint : `${mountPoint}/`);
    if (inside && (!best || mountPoint.length >= best.mountPoint.length)) {
      const [type, source] = right.split(' ');
      best = { mountPoint, type, source };
    }
  }
  if (!best) return { mountPoint: '?', type: '?', source: '?', memory: false };
  return { ...best, memory: best.type === 'tmpfs' || best.type === 'ramfs' };
}

// ---------------------------------------------------------------------------------------------
// Report

/** The issue's targets: each with what was measured and a verdict. */
function targetsOf({ summary, defaultWindow, failoverMs, workers }) {
  const distinct = summary.distinct[`ticketing-w${defaultWindow}`];
  // A kill with no grant within 15 s counts as infinitely long (the median must not drop it).
  const kills = failoverMs.map((ms) => ms ?? Infinity).sort((a, b) => a - b);
  const failover = kills.length ? kills[Math.floor((kills.length - 1) / 2)] : NaN;
  // met: null when the figure was not measured (--kills 0).
  const target = (id, figure, measured, goal, met) => ({
    id,
    figure,
    measured,
    goal,
    met: Number.isNaN(measured) ? null : met,
  });
  return [
    target(
      'distinct-ratio',
      `distinct keys, ${workers} workers: Ticketing (window ${defaultWindow}) ÷ etcd3 Lock, cycles/s`,
      summary.distinct.byWindow[defaultWindow].ratioToLock,
      '≥ 15×',
      summary.distinct.byWindow[defaultWindow].ratioToLock >= 15,
    ),
    target(
      'distinct-p99',
      `distinct keys, ${workers} workers: acquire + release p99, ms`,
      distinct.p99Ms,
      '≤ 20',
      distinct.p99Ms <= 20,
    ),
    target(
      'single-ratio',
      '1 worker: acquire + release p50 ÷ one raw etcd txn p50 (median of the rounds)',
      summary.single.ratio,
      '≤ 2.2×',
      summary.single.ratio <= 2.2,
    ),
    target(
      'failover',
      'failover, leader SIGKILL under load → first grant, ms (median)',
      failover,
      '≤ 2500',
      failover <= 2500,
    ),
  ];
}

/** The 1-worker figure over the rounds: per round, and the medians. */
function singleSummary(singles) {
  return {
    perRound: singles,
    ratioPerRound: singles.map((s) => s.ratio),
    ratio: median(singles.map((s) => s.ratio)),
    ticketingP50Ms: median(singles.map((s) => s.ticketing.p50Ms)),
    ticketingP99Ms: median(singles.map((s) => s.ticketing.p99Ms)),
    rawTxnP50Ms: median(singles.map((s) => s.rawTxn.p50Ms)),
    rawTxnP99Ms: median(singles.map((s) => s.rawTxn.p99Ms)),
    nodeCommitP50Ms: median(singles.map((s) => s.nodeCommit.p50Ms)),
  };
}

const batchCell = (b) => (b ? `${fixed(b.meanWrites, 1)} / ${b.p50Writes} / ${b.p99Writes} / ${b.maxWrites}` : '–');

/** Prints the tables on stdout and writes <out>/cluster-results.json (see cluster.mjs). */
export function report(context) {
  const { options, startedAt, loadAtStart, runs, singles, failover, leaderAtStart, systems, defaultWindow } = context;
  const { WORKLOADS, LEADER_TTL, LEASE } = context.constants;
  // Each cell: the median run by cycles/s (its own p50/p99/CPU stay together).
  const pick = (list) =>
    [...list].sort((a, b) => a.cyclesPerSecond - b.cyclesPerSecond)[Math.floor((list.length - 1) / 2)];
  const summary = { windows: options.windows, defaultWindow };
  const rows = [];
  for (const workload of WORKLOADS) {
    summary[workload] = { byWindow: {} };
    for (const system of systems) {
      const run = pick(runs[workload][system]);
      summary[workload][system] = run;
      const cpu = run.cpuPerCycleUs;
      const keys = (prefix) => Object.keys(cpu).filter((k) => k.startsWith(prefix));
      const group = (prefix) =>
        keys(prefix)
          .map((k) => fmt(cpu[k]))
          .join(' / ');
      const idle = keys('idle-').reduce((sum, k) => sum + cpu[k], 0);
      rows.push(
        `| ${workload} | ${system} | ${fmt(run.cyclesPerSecond)} | ${fixed(run.p50Ms)} | ${fixed(run.p99Ms)} | ${fixed(
          run.opsPerCommit,
        )} | ${batchCell(run.batches)} | ${fixed(run.etcd.walFsyncs / run.seconds, 0)} / ${fixed(
          run.walFsyncMeanMs,
          1,
        )} | ${group('etcd-')} | ${group('node-')} | ${keys('idle-').length ? fmt(idle) : '–'} | ${fmt(cpu.client)} |`,
      );
    }
    // The ratio is taken within each round (same moment, same machine load), then the median.
    for (const window of options.windows) {
      const ratios = runs[workload][`ticketing-w${window}`].map(
        (t, round) => t.cyclesPerSecond / runs[workload]['etcd3-lock'][round].cyclesPerSecond,
      );
      summary[workload].byWindow[window] = { ratioToLockPerRound: ratios, ratioToLock: median(ratios) };
    }
    Object.assign(summary[workload], summary[workload].byWindow[defaultWindow]);
  }
  const failoverMs = failover?.kills.map((k) => k.ms) ?? [];
  summary.single = singleSummary(singles);
  summary.targets = targetsOf({ summary, defaultWindow, failoverMs, workers: options.workers });
  const violations = [...Object.values(runs).flatMap((s) => Object.values(s).flat()), ...singles].reduce(
    (n, run) => n + run.overlaps + run.failures,
    0,
  );
  const setup =
    `${options.workers} loops over ${options.connections} connections per system, ${options.durationMs / 1000} s ` +
    `per run after ${options.warmupMs / 1000} s warm-up, median of ${options.rounds} interleaved round(s); ` +
    `3 etcd members (heartbeat ${ETCD_HEARTBEAT_MS} ms, election ${ETCD_ELECTION_MS} ms) and 3 Ticketing nodes ` +
    `(--leader-ttl ${LEADER_TTL}, --lease ${LEASE}) per commit window (${options.windows.join(', ')}; product ` +
    `default ${defaultWindow}) on loopback; ${cpus().length} CPUs shared, load ${loadAtStart.toFixed(1)} ` +
    `at start and ${loadavg()[0].toFixed(1)} at the end (1-minute averages); Node ${process.version}`;
  const lines = [
    `Cluster lock cycles (acquire + release): ${setup}`,
    '',
    '| workload | system | cycles/s | p50 ms | p99 ms | ops per etcd commit | batch keys mean / p50 / p99 / max ' +
      '| WAL fsyncs/s / mean ms (one member) | CPU µs/cycle etcd m0 / m1 / m2 | Ticketing n0 / n1 / n2 ' +
      '| other nodes (idle, sum) | client |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...rows,
    '',
    ...WORKLOADS.map(
      (w) =>
        `${w}: Ticketing (window ${defaultWindow}) / etcd3 Lock = ${fixed(summary[w].ratioToLock)}× (median of ` +
        `the rounds' ratios ${summary[w].ratioToLockPerRound.map((r) => fixed(r, 1)).join(', ')}), Ticketing p99 ` +
        `${fixed(summary[w][`ticketing-w${defaultWindow}`].p99Ms)} ms.`,
    ),
    failover
      ? `Failover (window ${defaultWindow}; leader SIGKILL under the distinct load → first grant by the new leader): ${failoverMs
          .map((ms) => (ms === null ? 'none within 15 s' : `${ms.toFixed(0)} ms`))
          .join(', ')}; median ${fixed(median(failoverMs), 0)} ms. Indeterminate outcomes per kill (requests in ` +
        `flight at the kill): ${failover.kills.map((k) => `${k.indeterminate} (${k.inFlight})`).join(', ')}; other errors ` +
        `${failover.kills.map((k) => k.otherErrors).join(', ')}.`
      : 'Failover: not measured (--kills 0).',
    `Safety check: ${
      violations === 0
        ? 'no overlapping holders, no failed release, hot-key tokens rising in every run'
        : `${violations} VIOLATIONS (overlapping holders, failed releases or falling tokens)`
    }.`,
    ...figureLines({ ...context, summary, windows: options.windows }),
  ];
  console.log(lines.join('\n'));
  // A --quick run is a smoke test: it must not replace the committed results (only with --out).
  if (options.quick && !options.outGiven) console.error('--quick: bench/ticketing/cluster-results.json left as it was');
  else {
    mkdirSync(options.out, { recursive: true });
    writeFileSync(
      join(options.out, 'cluster-results.json'),
      `${JSON.stringify(
        {
          date: startedAt,
          node: process.version,
          cpus: cpus().length,
          loadAtStart,
          loadAtEnd: loadavg()[0],
          options: { ...options, out: undefined, outGiven: undefined },
          etcd: { members: 3, heartbeatMs: ETCD_HEARTBEAT_MS, electionMs: ETCD_ELECTION_MS },
          etcdData: { dir: context.etcdDir, filesystem: context.filesystem },
          ticketing: {
            nodes: 3,
            leaderTtl: LEADER_TTL,
            lease: LEASE,
            windows: options.windows,
            defaultWindow,
            leaderAtStart,
          },
          summary,
          floor: context.floor,
          failover,
          runs,
        },
        null,
        2,
      )}\n`,
    );
  }
  if (violations > 0) process.exitCode = 1;
}

/** Markdown: the window curve, the 1-worker figure, the floor and the targets. */
function figureLines({ summary, windows, defaultWindow, floor, etcdDir, filesystem, options }) {
  const lines = [
    '',
    `### Commit window curve: Ticketing with \`--commit-window n\`, ${options.workers} workers (each cell the median round by cycles/s)`,
    '',
    '| window | distinct cycles/s | p50 ms | p99 ms | × etcd3 Lock (median; rounds) | batch keys mean ' +
      "| leader's commit p50 / p99 ms | hot cycles/s | hot p50 ms | hot p99 ms |",
    '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const w of windows) {
    const [d, h] = [summary.distinct[`ticketing-w${w}`], summary.hot[`ticketing-w${w}`]];
    const ratio = summary.distinct.byWindow[w];
    lines.push(
      `| ${w}${w === defaultWindow ? ' (default)' : ''} | ${fmt(d.cyclesPerSecond)} | ${fixed(d.p50Ms)} | ${fixed(
        d.p99Ms,
      )} | ${fixed(ratio.ratioToLock, 1)}× (${ratio.ratioToLockPerRound.map((r) => fixed(r, 1)).join(', ')}) | ${fixed(
        d.batches?.meanWrites,
        1,
      )} | ${fixed(d.batches?.commitP50Ms, 1)} / ${fixed(d.batches?.commitP99Ms, 1)} | ${fmt(h.cyclesPerSecond)} | ${fixed(h.p50Ms)} | ${fixed(h.p99Ms)} |`,
    );
  }
  const s = summary.single;
  lines.push(
    '',
    `### 1 worker: acquire + release on Ticketing (window ${defaultWindow}) beside one raw etcd txn, alternating in one process`,
    '',
    "| round | Ticketing p50 ms | p99 ms | raw txn p50 ms | p99 ms | leader's own commit p50 ms | Ticketing p50 ÷ raw txn p50 |",
    '|---:|---:|---:|---:|---:|---:|---:|',
    ...s.perRound.map(
      (r, i) =>
        `| ${i + 1} | ${fixed(r.ticketing.p50Ms)} | ${fixed(r.ticketing.p99Ms)} | ${fixed(r.rawTxn.p50Ms)} | ${fixed(
          r.rawTxn.p99Ms,
        )} | ${fixed(r.nodeCommit.p50Ms, 1)} | ${fixed(r.ratio)}× |`,
    ),
    `| median | ${fixed(s.ticketingP50Ms)} | ${fixed(s.ticketingP99Ms)} | ${fixed(s.rawTxnP50Ms)} | ${fixed(
      s.rawTxnP99Ms,
    )} | ${fixed(s.nodeCommitP50Ms, 1)} | ${fixed(s.ratio)}× (rounds ${fixed(Math.min(...s.ratioPerRound))}–${fixed(Math.max(...s.ratioPerRound))}) |`,
  );
  if (floor) {
    const members = Object.entries(floor.walFsync).map(
      ([name, f]) =>
        `${name} ${
          f
            ? `${fmt(f.count)} fsyncs, mean ${fixed(f.meanMs)} ms, p50 ≤ ${f.p50AtMostMs} ms, p99 ≤ ${f.p99AtMostMs} ms ` +
              `(${fixed(100 * f.underOneMs, 0)} % under 1 ms)`
            : '–'
        }`,
    );
    lines.push(
      '',
      `Floor (measured once, before the rounds, Ticketing idle): the etcd data dirs are in ${etcdDir}, on ` +
        `${filesystem.type} (${filesystem.source}, mounted at ${filesystem.mountPoint}): ` +
        `${filesystem.memory ? 'memory (tmpfs), so fsync costs next to nothing' : 'a disk, not tmpfs: every commit waits for fsyncs'}. ` +
        `One raw txn at a time for ${options.durationMs / 1000} s: ${fmt(floor.rawTxn.count)} txns, p50 ${fixed(
          floor.rawTxn.p50Ms,
        )} ms, p99 ${fixed(floor.rawTxn.p99Ms)} ms. etcd's WAL fsync (etcd_disk_wal_fsync_duration_seconds over that ` +
        `window; mean = sum ÷ count, p50/p99 as the bound of its 1-2-4… ms bucket): ${members.join('; ')}. ` +
        `Node's 4 KiB write + fdatasync on that filesystem: p50 ${fixed(floor.fdatasync.p50Ms)} ms, p99 ${fixed(
          floor.fdatasync.p99Ms,
        )} ms. A commit waits for the leader's fsync and a follower's; a cycle is two commits in a row, so ` +
        `one worker's cycle takes at least two txn round trips: ~2 × the raw txn p50 = ${fixed(
          2 * floor.rawTxn.p50Ms,
        )} ms here (the 1-worker table has the leader's own commits, timed inside the node, beside it).`,
    );
  }
  lines.push('', '| target | measured | goal | met |', '|---|---:|---:|---|');
  for (const t of summary.targets)
    lines.push(
      `| ${t.figure} | ${fixed(t.measured)} | ${t.goal} | ${t.met === null ? 'not measured' : t.met ? 'yes' : 'no'} |`,
    );
  return lines;
}
