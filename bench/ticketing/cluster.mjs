#!/usr/bin/env node
/**
 * Cluster benchmark: Ticketing in cluster mode (3 nodes on a 3-member etcd, loopback) beside two
 * ways of locking on the same etcd in the same run: the `etcd3` package's `Lock` helper, and a
 * plain one-txn-per-operation lock (acquire: txn put-if-absent; release: txn delete-if-value).
 *
 *   npm run bench:ticketing -- --cluster [--quick] [--duration 3s] [--warmup 1s] [--rounds 3]
 *                                         [--workers 64] [--connections 4] [--kills 3]
 *
 * Workloads: `workers` concurrent acquire+release loops over `connections` TCP connections
 * (Ticketing: half as many clients, each has a pipelined connection and a release lane; etcd:
 * that many `Etcd3` clients over all three endpoints):
 * - distinct: every loop has its own key;
 * - hot: every loop wants one key. Ticketing queues waiters at the leader (FIFO hand-off); the
 *   two etcd locks have no queue, so their loops retry at once until they get it (the usual spin).
 * Rounds interleave the systems: per round, each system runs both workloads in a fresh child
 * process, which reads the CPU time of every process (/proc/<pid>/stat) and etcd's own counters
 * (/metrics) at the start and end of each measured window: so every process's CPU is reported on
 * its own, per cycle. Each cell of the table is the median round (by cycles/s).
 * "ops per etcd commit" is (2 × cycles) / (etcd_server_proposals_committed_total delta): the average
 * group-commit batch as etcd saw it (each cycle is two state changes, a grant and a release; every
 * write txn is one Raft proposal, and so is every lease grant and revoke).
 * Failover: while a child runs the distinct workload, the Ticketing leader is SIGKILLed; the
 * failover time runs from the kill to the first acquire that a client started after the kill and
 * got granted (only a live leader can grant it). The killed node is restarted between kills.
 * Results: a markdown table on stdout, and bench/ticketing/cluster-results.json (not with --quick).
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import {
  cpuTimeMs,
  ensureEtcd,
  ETCD_ELECTION_MS,
  ETCD_HEARTBEAT_MS,
  ROOT,
  startEtcdCluster,
  startTicketingNodes,
} from '../../ticketing/test/cluster/harness.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const SYSTEMS = ['ticketing', 'etcd3-lock', 'etcd-txn'];
const WORKLOADS = ['distinct', 'hot'];
const LEADER_TTL = '2s';
const LEASE = '30s';
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
// A bound on a wait: it must not keep the process alive once the wait is over.
const timeLimit = (ms) => new Promise((resolve) => setTimeout(resolve, ms).unref());
const now = () => performance.timeOrigin + performance.now(); // epoch ms, comparable across processes

// ---------------------------------------------------------------------------------------------
// etcd counters

const COUNTERS = {
  proposals: 'etcd_server_proposals_committed_total', // one per write txn, lease grant or revoke
  puts: 'etcd_mvcc_put_total',
  deletes: 'etcd_mvcc_delete_total',
  walFsyncs: 'etcd_disk_wal_fsync_duration_seconds_count',
  walFsyncSeconds: 'etcd_disk_wal_fsync_duration_seconds_sum',
};

async function etcdCounters(endpoint) {
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const text = await (await fetch(`${endpoint}/metrics`, { signal: AbortSignal.timeout(5_000) })).text();
      const values = {};
      for (const [name, metric] of Object.entries(COUNTERS)) {
        const match = new RegExp(`^${metric} (\\S+)$`, 'm').exec(text);
        values[name] = match ? Number(match[1]) : NaN;
      }
      return values;
    } catch {
      // a starved member may be slow to answer: try again (bounded)
    }
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// Worker process: one system × one workload (or the failover load)

async function ticketingSystem({ addresses, leader, connections }) {
  const { TicketClient } = await import(join(ROOT, 'ticketing', 'dist', 'client.js'));
  const count = Math.max(1, Math.floor(connections / 2));
  // Start at the leader: the client does not re-send a request a follower answered with M.
  const primary = leader ?? addresses[0];
  const port = Number(primary.slice(primary.lastIndexOf(':') + 1));
  // Short reconnect backoffs, so the failover time measures the nodes rather than the client's
  // default back-off (250 ms for no_leader, doubling while it repeats).
  const clients = Array.from(
    { length: count },
    () =>
      new TicketClient({
        port,
        addresses: addresses,
        backoff: { initialMs: 20, maxMs: 200 },
        errorBackoffMs: { no_leader: 50, not_active: 50 },
      }),
  );
  return {
    async acquire(i, key) {
      const result = await clients[i % count].acquire(key, { waitMs: 60_000 });
      return result.status === 'acquired' ? result.token : undefined;
    },
    async release(i, key, token) {
      return (await clients[i % count].release(key, token)).status === 'released';
    },
    close: () => Promise.all(clients.map((c) => c.close())),
  };
}

async function etcdSystem({ system, endpoints, connections }) {
  const { Etcd3, EtcdLockFailedError } = await import('etcd3');
  const clients = Array.from({ length: connections }, () => new Etcd3({ hosts: endpoints }));
  const locks = new Map();
  let seq = 0;
  return {
    // Resolves a token, or undefined when the key is held (the caller spins).
    async acquire(i, key) {
      const client = clients[i % connections];
      if (system === 'etcd3-lock') {
        const lock = client.lock(key).ttl(30);
        try {
          await lock.acquire();
        } catch (error) {
          if (error instanceof EtcdLockFailedError) return undefined;
          throw error;
        }
        const token = ++seq;
        locks.set(token, lock);
        return BigInt(token);
      }
      const value = `${process.pid}-${++seq}`;
      const result = await client.if(key, 'Create', '==', 0).then(client.put(key).value(value)).commit();
      if (!result.succeeded) return undefined;
      locks.set(value, true);
      return value;
    },
    async release(i, key, token) {
      if (system === 'etcd3-lock') {
        const lock = locks.get(Number(token));
        locks.delete(Number(token));
        await lock.release();
        return true;
      }
      locks.delete(token);
      const client = clients[i % connections];
      return (await client.if(key, 'Value', '==', token).then(client.delete().key(key)).commit()).succeeded;
    },
    close: async () => clients.forEach((c) => c.close()),
  };
}

/** The batch-size counters each node's commit probe wrote, summed over `nodePids`. */
function commitStats(statsDir, nodePids) {
  const total = { batches: 0, txns: 0, writes: 0, replies: 0, writesHistogram: {} };
  for (const pid of nodePids) {
    let stats;
    try {
      stats = JSON.parse(readFileSync(join(statsDir, `${pid}.json`), 'utf8'));
    } catch {
      continue; // no batch committed by this node yet
    }
    for (const name of ['batches', 'txns', 'writes', 'replies']) total[name] += stats[name];
    for (const [size, n] of Object.entries(stats.writesHistogram)) {
      total.writesHistogram[size] = (total.writesHistogram[size] ?? 0) + n;
    }
  }
  return total;
}

/** Batches committed between two commitStats() samples: count, mean and percentiles of their size. */
function batchSizes(before, after) {
  const batches = after.batches - before.batches;
  if (batches <= 0) return null;
  const sizes = Object.keys(after.writesHistogram)
    .map(Number)
    .sort((a, b) => a - b);
  const at = (q) => {
    let seen = 0;
    for (const size of sizes) {
      seen += after.writesHistogram[size] - (before.writesHistogram[size] ?? 0);
      if (seen >= Math.ceil(batches * q)) return size;
    }
    return sizes.at(-1);
  };
  return {
    batches,
    txns: after.txns - before.txns,
    meanWrites: (after.writes - before.writes) / batches,
    meanReplies: (after.replies - before.replies) / batches,
    p50Writes: at(0.5),
    p99Writes: at(0.99),
    maxWrites: sizes.filter((s) => after.writesHistogram[s] > (before.writesHistogram[s] ?? 0)).at(-1),
  };
}

async function runWorker(config) {
  const { system, workload, workers, durationMs, warmupMs, prefix, pids, metricsEndpoints } = config;
  const lock = system === 'ticketing' ? await ticketingSystem(config) : await etcdSystem(config);
  // Every latency, preallocated: writing a sample never allocates, so the GC measures nothing.
  const latencies = new Float64Array(4_000_000);
  const successes = config.failover ? [] : undefined; // [start, end] of every grant, failover only
  let cycles = 0;
  let measuring = false;
  let stop = false;
  let failures = 0;
  let errors = 0;
  let overlaps = 0;
  let holders = 0;
  let lastHotToken;

  const loop = async (i) => {
    let generation = 0;
    while (!stop) {
      // After an Indeterminate outcome the old key may still be held (until its lease ends): move on.
      const key = workload === 'hot' ? `${prefix}:hot` : `${prefix}:k${i}:${generation}`;
      const started = now();
      try {
        const token = await lock.acquire(i, key);
        if (token === undefined) {
          if (system === 'ticketing') failures++; // timed-out or busy: never expected here
          continue; // etcd locks: held, spin
        }
        successes?.push(started, now());
        if (workload === 'hot') {
          if (++holders > 1) overlaps++;
          // Fencing: Ticketing's tokens on one key must rise with every grant.
          if (system === 'ticketing' && lastHotToken !== undefined && token <= lastHotToken) overlaps++;
          lastHotToken = token;
          await undefined;
          holders--;
        }
        if (!(await lock.release(i, key, token))) failures++;
        if (measuring && cycles < latencies.length) latencies[cycles++] = now() - started;
      } catch (error) {
        errors++;
        generation++;
        if (config.failover === undefined && errors <= 3) console.error(`${system}/${workload}: ${error.message}`);
        await sleep(10);
      }
    }
  };

  const sample = async () => ({
    cpu: Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, cpuTimeMs(pid)])),
    client: process.cpuUsage(),
    etcd: await etcdCounters(metricsEndpoints[0]),
    commits: commitStats(config.statsDir, config.nodePids),
  });

  const loops = Array.from({ length: workers }, (_, i) => loop(i));
  let result;
  if (config.failover) {
    process.send({ ready: true });
    // The parent sends { killedAt } per kill, and { stop } at the end.
    await new Promise((resolve) => {
      process.on('message', (message) => {
        if (message.stop) return resolve();
        const deadline = Date.now() + 15_000;
        const poll = setInterval(() => {
          for (let k = 0; k < successes.length; k += 2) {
            if (successes[k] >= message.killedAt) {
              clearInterval(poll);
              process.send({ killedAt: message.killedAt, firstGrantAt: successes[k + 1] });
              return;
            }
          }
          if (Date.now() > deadline) {
            clearInterval(poll);
            process.send({ killedAt: message.killedAt, firstGrantAt: null });
          }
        }, 5);
      });
    });
    result = { errors, failures };
  } else {
    await sleep(warmupMs);
    const before = await sample();
    measuring = true;
    const started = now();
    await sleep(durationMs);
    measuring = false;
    const seconds = (now() - started) / 1000;
    const after = await sample();
    const measured = latencies.subarray(0, cycles).sort();
    const at = (q) => (cycles ? measured[Math.min(cycles - 1, Math.ceil(cycles * q) - 1)] : NaN);
    const cpuPerCycleUs = {};
    for (const name of Object.keys(pids)) {
      const used = after.cpu[name] - before.cpu[name];
      cpuPerCycleUs[name] = cycles && Number.isFinite(used) ? (used * 1000) / cycles : null;
    }
    const clientUs = after.client.user + after.client.system - before.client.user - before.client.system;
    cpuPerCycleUs.client = cycles ? clientUs / cycles : null;
    const etcdDelta = {};
    for (const name of Object.keys(COUNTERS))
      etcdDelta[name] = (after.etcd?.[name] ?? NaN) - (before.etcd?.[name] ?? NaN);
    result = {
      system,
      workload,
      cycles,
      seconds,
      cyclesPerSecond: cycles / seconds,
      p50Ms: at(0.5),
      p99Ms: at(0.99),
      p999Ms: at(0.999),
      etcd: etcdDelta,
      opsPerCommit: etcdDelta.proposals > 0 ? (2 * cycles) / etcdDelta.proposals : null,
      batches: batchSizes(before.commits, after.commits),
      walFsyncMeanMs: etcdDelta.walFsyncs > 0 ? (etcdDelta.walFsyncSeconds * 1000) / etcdDelta.walFsyncs : null,
      cpuPerCycleUs,
      failures,
      errors,
      overlaps,
    };
  }
  stop = true;
  // Loops blocked in a queue end when their grant comes; bounded so a broken run cannot hang.
  await Promise.race([Promise.all(loops), timeLimit(10_000)]);
  await Promise.race([lock.close(), timeLimit(5_000)]);
  return result;
}

// ---------------------------------------------------------------------------------------------
// Orchestration

function parseArgs(argv) {
  const quick = argv.includes('--quick');
  const options = quick
    ? { durationMs: 1_000, warmupMs: 500, rounds: 1, workers: 64, connections: 4, kills: 1 }
    : { durationMs: 3_000, warmupMs: 1_000, rounds: 3, workers: 64, connections: 4, kills: 3 };
  const durations = { '--duration': 'durationMs', '--warmup': 'warmupMs' };
  const counts = { '--rounds': 'rounds', '--workers': 'workers', '--connections': 'connections', '--kills': 'kills' };
  const rest = argv.filter((a) => a !== '--quick' && a !== '--cluster');
  for (let i = 0; i < rest.length; i += 2) {
    const [flag, value] = [rest[i], rest[i + 1]];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    if (flag in durations) {
      const m = /^(\d+(?:\.\d+)?)(ms|s)?$/.exec(value);
      if (!m) throw new Error(`${flag}: use e.g. 3s or 500ms`);
      options[durations[flag]] = Number(m[1]) * (m[2] === 'ms' ? 1 : 1000);
    } else if (flag in counts) {
      const n = Number.parseInt(value, 10);
      if (!(n >= 0) || String(n) !== value) throw new Error(`${flag}: a whole number, not ${value}`);
      options[counts[flag]] = n;
    } else {
      throw new Error(`unknown flag ${flag}`);
    }
  }
  return { ...options, quick };
}

function spawnWorker(config, { ipc = false } = {}) {
  return spawn(process.execPath, [fileURLToPath(import.meta.url), '--worker', JSON.stringify(config)], {
    stdio: ['ignore', 'pipe', 'inherit', ...(ipc ? ['ipc'] : [])],
    cwd: ROOT,
  });
}

async function runInChild(config, timeoutMs) {
  const child = spawnWorker(config);
  let out = '';
  child.stdout.on('data', (chunk) => (out += chunk));
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  const [code, signal] = await once(child, 'exit');
  clearTimeout(timer);
  if (code !== 0) throw new Error(`benchmark worker ${config.system}/${config.workload} failed (${code ?? signal})`);
  return JSON.parse(out);
}

function pidsOf(etcd, nodes) {
  const pids = {};
  etcd.members.forEach((m) => (pids[`etcd-${m.name}`] = m.pid));
  nodes.nodes.forEach((n) => (pids[`node-${n.index}`] = n.pid));
  return pids;
}

async function measureFailover(etcd, nodes, options) {
  const config = {
    system: 'ticketing',
    workload: 'distinct',
    failover: true,
    addresses: nodes.addresses,
    leader: (await nodes.waitForLeader({ timeoutMs: 15_000 })).address,
    endpoints: etcd.endpoints,
    connections: options.connections,
    workers: options.workers,
    prefix: `failover-${Date.now().toString(36)}`,
    pids: {},
    metricsEndpoints: etcd.endpoints,
    nodePids: [],
  };
  const child = spawnWorker(config, { ipc: true });
  const messages = [];
  const waiting = [];
  child.on('message', (m) => (waiting.length ? waiting.shift()(m) : messages.push(m)));
  const next = (timeoutMs) =>
    new Promise((resolve, reject) => {
      if (messages.length) return resolve(messages.shift());
      const timer = setTimeout(() => reject(new Error('failover worker did not answer')), timeoutMs);
      waiting.push((m) => {
        clearTimeout(timer);
        resolve(m);
      });
    });
  const kills = [];
  try {
    await next(30_000); // ready
    for (let k = 0; k < options.kills; k++) {
      await sleep(options.quick ? 1_000 : 1_500); // steady load first
      const leader = await nodes.waitForLeader({ timeoutMs: 15_000 });
      const killedAt = now();
      await leader.kill('SIGKILL');
      child.send({ killedAt });
      const { firstGrantAt } = await next(20_000);
      const ms = firstGrantAt === null ? null : firstGrantAt - killedAt;
      kills.push({ killed: leader.address, ms });
      console.error(
        `failover ${k + 1}: killed leader ${leader.address}; first grant from the new leader after ${
          ms === null ? 'NONE within 15 s' : `${ms.toFixed(0)} ms`
        }`,
      );
      await leader.restart();
    }
    child.send({ stop: true });
    let out = '';
    child.stdout.on('data', (chunk) => (out += chunk));
    await Promise.race([once(child, 'exit'), timeLimit(15_000)]);
    const tail = out ? JSON.parse(out) : {};
    return { kills, errorsDuringFailover: tail.errors, failures: tail.failures };
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
}

const fmt = (n) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '–');
const fixed = (n, digits = 2) => (Number.isFinite(n) ? n.toFixed(digits) : '–');
function median(values) {
  const sorted = values.filter(Number.isFinite).sort((a, b) => a - b);
  return sorted.length ? sorted[Math.floor((sorted.length - 1) / 2)] : NaN;
}

export async function main(argv) {
  const options = parseArgs(argv);
  const found = await ensureEtcd();
  if (!found.binary) throw new Error(`the cluster benchmark needs etcd: ${found.reason}`);
  try {
    await import('etcd3');
  } catch {
    throw new Error('the cluster benchmark needs the etcd3 package (npm ci installs it with the Ticketing package)');
  }
  const startedAt = new Date().toISOString();
  const began = Date.now();
  const loadAtStart = loadavg()[0];
  let etcd;
  let nodes;
  const statsDir = mkdtempSync(join(tmpdir(), 'ticketing-bench-commits-'));
  const cleanup = async () => {
    await nodes?.stop(3_000);
    await etcd?.stop();
    rmSync(statsDir, { recursive: true, force: true });
  };
  const onSignal = () => cleanup().finally(() => process.exit(130));
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const runs = Object.fromEntries(WORKLOADS.map((w) => [w, Object.fromEntries(SYSTEMS.map((s) => [s, []]))]));
  let failover;
  let leaderAtStart;
  try {
    etcd = await startEtcdCluster({ members: 3 });
    nodes = await startTicketingNodes({
      count: 3,
      etcdEndpoints: etcd.endpoints,
      leaderTtl: LEADER_TTL,
      lease: LEASE,
      execArgv: ['--import', pathToFileURL(join(here, 'commit-probe.mjs')).href],
      env: { TICKETING_COMMIT_STATS: statsDir },
    });
    leaderAtStart = (await nodes.waitForLeader({ timeoutMs: 15_000 })).address;
    console.error(
      `etcd ${etcd.endpoints.join(' ')}; Ticketing ${nodes.addresses.join(' ')} (leader ${leaderAtStart}) ` +
        `[${((Date.now() - began) / 1000).toFixed(1)} s]`,
    );
    for (let round = 1; round <= options.rounds; round++) {
      for (const system of SYSTEMS) {
        // One child per system and round runs both workloads: it loads its client library once.
        const results = await runInChild(
          {
            system,
            workloads: WORKLOADS,
            addresses: nodes.addresses,
            leader: (await nodes.waitForLeader({ timeoutMs: 15_000 })).address,
            endpoints: etcd.endpoints,
            connections: options.connections,
            workers: options.workers,
            durationMs: options.durationMs,
            warmupMs: options.warmupMs,
            prefix: `bench${round}${system}`,
            pids: pidsOf(etcd, nodes),
            statsDir,
            nodePids: nodes.nodes.map((n) => n.pid),
            metricsEndpoints: etcd.endpoints,
          },
          2 * (options.warmupMs + options.durationMs) + 90_000,
        );
        for (const run of results) {
          const { workload } = run;
          runs[workload][system].push(run);
          console.error(
            `round ${round} ${workload.padEnd(8)} ${system.padEnd(10)} ${fmt(run.cyclesPerSecond).padStart(7)} cycles/s` +
              `  p50 ${fixed(run.p50Ms)} ms  p99 ${fixed(run.p99Ms)} ms  ops/commit ${fixed(run.opsPerCommit)}` +
              (run.errors ? `  errors ${run.errors}` : '') +
              `  [${((Date.now() - began) / 1000).toFixed(1)} s]`,
          );
        }
      }
    }
    if (options.kills > 0) failover = await measureFailover(etcd, nodes, options);
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await cleanup();
  }
  console.error(`done [${((Date.now() - began) / 1000).toFixed(1)} s]`);
  report({ options, startedAt, loadAtStart, runs, failover, leaderAtStart });
}

const batchCell = (b) => (b ? `${fixed(b.meanWrites, 1)} / ${b.p50Writes} / ${b.p99Writes} / ${b.maxWrites}` : '–');

function report({ options, startedAt, loadAtStart, runs, failover, leaderAtStart }) {
  // Each cell: the median run by cycles/s (its own p50/p99/CPU stay together).
  const pick = (list) =>
    [...list].sort((a, b) => a.cyclesPerSecond - b.cyclesPerSecond)[Math.floor((list.length - 1) / 2)];
  const summary = {};
  const rows = [];
  for (const workload of WORKLOADS) {
    summary[workload] = {};
    for (const system of SYSTEMS) {
      const run = pick(runs[workload][system]);
      summary[workload][system] = run;
      const cpu = run.cpuPerCycleUs;
      const group = (prefix) =>
        Object.keys(cpu)
          .filter((k) => k.startsWith(prefix))
          .map((k) => fmt(cpu[k]))
          .join(' / ');
      rows.push(
        `| ${workload} | ${system} | ${fmt(run.cyclesPerSecond)} | ${fixed(run.p50Ms)} | ${fixed(run.p99Ms)} | ${fixed(
          run.opsPerCommit,
        )} | ${batchCell(run.batches)} | ${fixed(run.etcd.walFsyncs / run.seconds, 0)} / ${fixed(
          run.walFsyncMeanMs,
          1,
        )} | ${group('etcd-')} | ${group('node-')} | ${fmt(cpu.client)} |`,
      );
    }
    // The ratio is taken within each round (same moment, same machine load), then the median.
    const ratios = runs[workload].ticketing.map(
      (t, round) => t.cyclesPerSecond / runs[workload]['etcd3-lock'][round].cyclesPerSecond,
    );
    summary[workload].ratioToLockPerRound = ratios;
    summary[workload].ratioToLock = median(ratios);
    summary[workload].targetMet = summary[workload].ratioToLock >= 10 && summary[workload].ticketing.p99Ms <= 20;
  }
  const violations = Object.values(runs)
    .flatMap((s) => Object.values(s).flat())
    .reduce((n, run) => n + run.overlaps + run.failures, 0);
  const failoverMs = failover?.kills.map((k) => k.ms) ?? [];
  const setup =
    `${options.workers} loops over ${options.connections} connections per system, ${options.durationMs / 1000} s ` +
    `per run after ${options.warmupMs / 1000} s warm-up, median of ${options.rounds} interleaved round(s); ` +
    `3 etcd members (heartbeat ${ETCD_HEARTBEAT_MS} ms, election ${ETCD_ELECTION_MS} ms) and 3 Ticketing nodes ` +
    `(--leader-ttl ${LEADER_TTL}, --lease ${LEASE}) on loopback; ${cpus().length} CPUs shared, load ${loadAtStart.toFixed(1)} ` +
    `at start; Node ${process.version}`;
  const lines = [
    `Cluster lock cycles (acquire + release): ${setup}`,
    '',
    '| workload | system | cycles/s | p50 ms | p99 ms | ops per etcd commit | batch keys mean / p50 / p99 / max ' +
      '| WAL fsyncs/s / mean ms (one member) | CPU µs/cycle etcd m0 / m1 / m2 | Ticketing n0 / n1 / n2 | client |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...rows,
    '',
    ...WORKLOADS.map(
      (w) =>
        `${w}: Ticketing / etcd3 Lock = ${fixed(summary[w].ratioToLock)}× (median of the rounds' ` +
        `ratios ${summary[w].ratioToLockPerRound.map((r) => fixed(r, 1)).join(', ')}), Ticketing p99 ` +
        `${fixed(summary[w].ticketing.p99Ms)} ms: target (≥ 10×, p99 ≤ 20 ms) ${summary[w].targetMet ? 'met' : 'NOT met'}.`,
    ),
    failover
      ? `Failover (leader SIGKILL under the distinct load → first grant by the new leader): ${failoverMs
          .map((ms) => (ms === null ? 'none within 15 s' : `${ms.toFixed(0)} ms`))
          .join(', ')}; median ${fixed(median(failoverMs), 0)} ms.`
      : 'Failover: not measured (--kills 0).',
    `Safety check: ${
      violations === 0
        ? 'no overlapping holders, no failed release, hot-key tokens rising in every run'
        : `${violations} VIOLATIONS (overlapping holders, failed releases or falling tokens)`
    }.`,
  ];
  console.log(lines.join('\n'));
  // A --quick run is a smoke test: it must not replace the committed results.
  if (options.quick) console.error('--quick: bench/ticketing/cluster-results.json left as it was');
  else
    writeFileSync(
      join(here, 'cluster-results.json'),
      `${JSON.stringify(
        {
          date: startedAt,
          node: process.version,
          cpus: cpus().length,
          loadAtStart,
          options,
          etcd: { members: 3, heartbeatMs: ETCD_HEARTBEAT_MS, electionMs: ETCD_ELECTION_MS },
          ticketing: { nodes: 3, leaderTtl: LEADER_TTL, lease: LEASE, leaderAtStart },
          summary,
          failover,
          runs,
        },
        null,
        2,
      )}\n`,
    );
  if (violations > 0) process.exitCode = 1;
}

/** Runs each of `config.workloads` in turn (or the one `config.workload`); resolves the results. */
async function runWorkloads(config) {
  if (!config.workloads) return runWorker(config);
  const results = [];
  for (const workload of config.workloads) {
    results.push(await runWorker({ ...config, workload, prefix: `${config.prefix}${workload}` }));
  }
  return results;
}

if (process.argv[2] === '--worker') {
  // A worker prints its result as JSON on stdout (a pipe: written synchronously) and exits.
  const result = await runWorkloads(JSON.parse(process.argv[3])).catch((error) => {
    console.error(error);
    process.exit(1);
  });
  process.stdout.write(JSON.stringify(result));
  process.exit(0);
}
