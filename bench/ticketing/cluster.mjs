#!/usr/bin/env node
/**
 * Cluster benchmark: Ticketing in cluster mode (3 nodes on a 3-member etcd, loopback) beside two
 * ways of locking on the same etcd in the same run: the `etcd3` package's `Lock` helper, and a
 * plain one-txn-per-operation lock (acquire: txn put-if-absent; release: txn delete-if-value).
 *
 *   npm run bench:ticketing -- --cluster [--quick] [--duration 3s] [--warmup 1s] [--rounds 3]
 *                                         [--workers 64] [--connections 4] [--kills 3]
 *                                         [--window 1,4,16] [--out dir]
 *   (`--rounds 0 --kills n`: the failover alone, printed as JSON)
 *
 * Workloads: `workers` concurrent acquire+release loops over `connections` TCP connections
 * (Ticketing: half as many clients, each has a pipelined connection and a release lane; etcd:
 * that many `Etcd3` clients over all three endpoints):
 * - distinct: every loop has its own key;
 * - hot: every loop wants one key. Ticketing queues waiters at the leader (FIFO hand-off); the
 *   two etcd locks have no queue, so their loops retry at once until they get it (the usual spin).
 * Commit window: `--window n[,n…]` (default: the product's default, CLUSTER_DEFAULTS.commitWindow) starts
 * one group of 3 nodes per size, `serve --cluster --commit-window n`, each under its own prefix on
 * the one etcd; the groups not measured sit idle (their CPU is reported as "other nodes"). The
 * product default is always one of them: the failover and the 1-worker figure are measured on it.
 * Rounds interleave the systems (each window size is a system; the order rotates by one per
 * round): per round, each system runs both workloads in a fresh child process, which reads the
 * CPU time of every process (/proc/<pid>/stat) and etcd's own counters (/metrics) at the start
 * and end of each measured window: so every process's CPU is reported on its own, per cycle. Each
 * cell of the table is the median round (by cycles/s); each ratio the median of the rounds' ratios.
 * "ops per etcd commit" is (2 × cycles) / (etcd_server_proposals_committed_total delta): the average
 * group-commit batch as etcd saw it (each cycle is two state changes, a grant and a release; every
 * write txn is one Raft proposal, and so is every lease grant and revoke).
 * 1 worker: the child of the default window also runs one loop that alternates a Ticketing
 * acquire+release and one raw etcd txn (cluster-figures.mjs): p50/p99 of each, and their ratio per
 * round. The floor, once before the rounds: a raw txn at a time, and etcd's WAL fsync time.
 * Failover: while a child runs the distinct workload, the Ticketing leader is SIGKILLed; the
 * failover time runs from the kill to the first acquire that a client started after the kill and
 * got granted (only a live leader can grant it). The killed node is restarted between kills. Per
 * kill, the errors the loops met until the next kill are counted, Indeterminate ones apart,
 * beside the requests that were in flight (sent, unanswered) just before the kill: only those can
 * honestly come back Indeterminate.
 * Results: a markdown table on stdout, and <out>/cluster-results.json (default bench/ticketing/;
 * a --quick run writes it only with --out, so it never replaces the committed results).
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import {
  cpuTimeMs,
  findEtcd,
  ROOT,
  startEtcdCluster,
  startTicketingNodes,
} from '../../ticketing/test/cluster/harness.mjs';
import {
  batchSizes,
  commitStats,
  counterDelta,
  etcdCounters,
  filesystemOf,
  fixed,
  fmt,
  latencyOf,
  report,
  runFloor,
  runSingle,
} from './cluster-figures.mjs';
import { countErrorsPerKill } from './failover-errors.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const WORKLOADS = ['distinct', 'hot'];
const LEADER_TTL = '2s';
const LEASE = '30s';
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
// A bound on a wait: it must not keep the process alive once the wait is over.
const timeLimit = (ms) => new Promise((resolve) => setTimeout(resolve, ms).unref());
const now = () => performance.timeOrigin + performance.now(); // epoch ms, comparable across processes

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
    /** Requests sent and not yet answered, over every client: what a kill now could leave open. */
    inFlight: () => clients.reduce((sum, c) => sum + c.pending.inFlight, 0),
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

async function runWorker(config) {
  const { system, workload, workers, durationMs, warmupMs, prefix, pids, metricsEndpoints } = config;
  const lock = system === 'ticketing' ? await ticketingSystem(config) : await etcdSystem(config);
  // Every latency, preallocated: writing a sample never allocates, so the GC measures nothing.
  const latencies = new Float64Array(4_000_000);
  const successes = config.failover ? [] : undefined; // [start, end] of every grant, failover only
  const errorLog = config.failover ? [] : undefined; // [when, code] of every error, failover only
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
        errorLog?.push([now(), error.code ?? error.name]);
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

  if (workload === 'single') {
    const single = await runSingle(config, lock, sample);
    await Promise.race([lock.close(), timeLimit(5_000)]);
    return { ...single, window: config.window };
  }
  const loops = Array.from({ length: workers }, (_, i) => loop(i));
  let result;
  if (config.failover) {
    process.send({ ready: true });
    // The parent sends { killedAt } per kill, and { stop } at the end.
    await new Promise((resolve) => {
      process.on('message', (message) => {
        if (message.stop) return resolve();
        if (message.snapshot) return process.send({ inFlight: lock.inFlight() });
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
    result = { errors, failures, errorLog };
  } else {
    await sleep(warmupMs);
    const before = await sample();
    measuring = true;
    const started = now();
    await sleep(durationMs);
    measuring = false;
    const seconds = (now() - started) / 1000;
    const after = await sample();
    const cpuPerCycleUs = {};
    for (const name of Object.keys(pids)) {
      const used = after.cpu[name] - before.cpu[name];
      cpuPerCycleUs[name] = cycles && Number.isFinite(used) ? (used * 1000) / cycles : null;
    }
    const clientUs = after.client.user + after.client.system - before.client.user - before.client.system;
    cpuPerCycleUs.client = cycles ? clientUs / cycles : null;
    const etcdDelta = counterDelta(before.etcd, after.etcd);
    result = {
      system,
      window: config.window,
      workload,
      cycles,
      seconds,
      cyclesPerSecond: cycles / seconds,
      ...latencyOf(latencies, cycles),
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

/** The options; `windows`: the commit window sizes to measure, `defaultWindow` always among them. */
function parseArgs(argv, { defaultWindow, maxWindow }) {
  const quick = argv.includes('--quick');
  const options = quick
    ? { durationMs: 400, warmupMs: 200, rounds: 1, workers: 16, connections: 4, kills: 1 }
    : { durationMs: 3_000, warmupMs: 1_000, rounds: 3, workers: 64, connections: 4, kills: 3 };
  options.windows = [defaultWindow];
  options.out = here;
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
    } else if (flag === '--window') {
      const sizes = value.split(',').map((v) => Number.parseInt(v, 10));
      if (!sizes.every((n, i) => n >= 1 && n <= maxWindow && String(n) === value.split(',')[i]))
        throw new Error(`--window: sizes from 1 to ${maxWindow}, comma-separated, not ${value}`);
      options.windows = [...new Set([...sizes, defaultWindow])].sort((a, b) => a - b);
    } else if (flag === '--out') {
      options.out = value;
      options.outGiven = true;
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

/** Every process to watch: etcd's members, the nodes of `window`'s group, and the others (idle). */
function pidsOf(etcd, groups, window) {
  const pids = {};
  etcd.members.forEach((m) => (pids[`etcd-${m.name}`] = m.pid));
  groups.get(window).nodes.forEach((n) => (pids[`node-${n.index}`] = n.pid));
  for (const [w, group] of groups)
    if (w !== window) group.nodes.forEach((n) => (pids[`idle-w${w}-${n.index}`] = n.pid));
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
      await sleep(options.quick ? 500 : 1_500); // steady load first
      const leader = await nodes.waitForLeader({ timeoutMs: 15_000 });
      child.send({ snapshot: true });
      const { inFlight } = await next(5_000); // sent and unanswered just before the kill
      const killedAt = now();
      await leader.kill('SIGKILL');
      child.send({ killedAt });
      const { firstGrantAt } = await next(20_000);
      const ms = firstGrantAt === null ? null : firstGrantAt - killedAt;
      kills.push({ killed: leader.address, killedAt, ms, inFlight });
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
    countErrorsPerKill(kills, tail.errorLog ?? []);
    return { kills, errorsDuringFailover: tail.errors, failures: tail.failures };
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
}

export async function main(argv) {
  const { CLUSTER_DEFAULTS, MAX_COMMIT_WINDOW } = await import(
    join(ROOT, 'ticketing', 'dist', 'cluster', 'options.js')
  );
  const defaultWindow = CLUSTER_DEFAULTS.commitWindow;
  const options = parseArgs(argv, { defaultWindow, maxWindow: MAX_COMMIT_WINDOW });
  const found = await findEtcd();
  if (!found.binary) throw new Error(`the cluster benchmark needs etcd: ${found.reason}`);
  try {
    await import('etcd3');
  } catch {
    throw new Error('the cluster benchmark needs the etcd3 package (npm ci installs it with the Ticketing package)');
  }
  const startedAt = new Date().toISOString();
  const began = Date.now();
  const elapsed = () => `[${((Date.now() - began) / 1000).toFixed(1)} s]`;
  const loadAtStart = loadavg()[0];
  let etcd;
  const groups = new Map(); // commit window → its 3 nodes
  const statsDir = mkdtempSync(join(tmpdir(), 'ticketing-bench-commits-'));
  const cleanup = async () => {
    await Promise.all([...groups.values()].map((g) => g.stop(3_000)));
    await etcd?.stop();
    rmSync(statsDir, { recursive: true, force: true });
  };
  const onSignal = () => cleanup().finally(() => process.exit(130));
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const systems = [...options.windows.map((w) => `ticketing-w${w}`), 'etcd3-lock', 'etcd-txn'];
  const runs = Object.fromEntries(WORKLOADS.map((w) => [w, Object.fromEntries(systems.map((s) => [s, []]))]));
  const singles = [];
  let failover;
  let floor;
  let leaderAtStart;
  let filesystem;
  try {
    etcd = await startEtcdCluster({ members: 3 });
    filesystem = filesystemOf(etcd.dir);
    for (const window of options.windows) {
      const group = await startTicketingNodes({
        count: 3,
        etcdEndpoints: etcd.endpoints,
        prefix: `/ticketing-bench-${process.pid}-w${window}/`,
        leaderTtl: LEADER_TTL,
        lease: LEASE,
        extraArgs: ['--commit-window', String(window)],
        execArgv: ['--import', pathToFileURL(join(here, 'commit-probe.mjs')).href],
        env: { TICKETING_COMMIT_STATS: statsDir },
      });
      groups.set(window, group);
      const leader = (await group.waitForLeader({ timeoutMs: 15_000 })).address;
      if (window === defaultWindow) leaderAtStart = leader;
      console.error(
        `Ticketing --commit-window ${window}: ${group.addresses.join(' ')} (leader ${leader}) ${elapsed()}`,
      );
    }
    console.error(`etcd ${etcd.endpoints.join(' ')}, data in ${etcd.dir} (${filesystem.type}) ${elapsed()}`);
    floor = await runInChild(
      {
        system: 'floor',
        figure: 'floor',
        endpoints: etcd.endpoints,
        memberNames: etcd.members.map((m) => m.name),
        prefix: `/bench-floor-${process.pid}`,
        warmupMs: options.warmupMs,
        durationMs: options.durationMs,
        etcdDir: etcd.dir,
      },
      3 * (options.warmupMs + options.durationMs) + 60_000,
    );
    console.error(
      `floor: raw txn p50 ${fixed(floor.rawTxn.p50Ms)} ms, p99 ${fixed(floor.rawTxn.p99Ms)} ms; WAL fsync mean ` +
        `${Object.values(floor.walFsync)
          .map((f) => fixed(f?.meanMs))
          .join(' / ')} ms ${elapsed()}`,
    );
    for (let round = 1; round <= options.rounds; round++) {
      // The order rotates by one per round, so no system always runs first or after the same one.
      const order = systems.map((_, i) => systems[(i + round - 1) % systems.length]);
      for (const name of order) {
        const window = name.startsWith('ticketing-w') ? Number(name.slice('ticketing-w'.length)) : defaultWindow;
        const system = name.startsWith('ticketing') ? 'ticketing' : name;
        const nodes = groups.get(window);
        // One child per system and round runs every workload: it loads its client library once.
        const workloads = [...WORKLOADS, ...(system === 'ticketing' && window === defaultWindow ? ['single'] : [])];
        const results = await runInChild(
          {
            system,
            window: system === 'ticketing' ? window : undefined,
            workloads,
            addresses: nodes.addresses,
            leader: (await nodes.waitForLeader({ timeoutMs: 15_000 })).address,
            endpoints: etcd.endpoints,
            connections: options.connections,
            workers: options.workers,
            durationMs: options.durationMs,
            warmupMs: options.warmupMs,
            prefix: `bench${round}${name}`,
            pids: pidsOf(etcd, groups, window),
            statsDir,
            nodePids: nodes.nodes.map((n) => n.pid),
            metricsEndpoints: etcd.endpoints,
          },
          workloads.length * (options.warmupMs + options.durationMs) + 90_000,
        );
        for (const run of results) {
          const { workload } = run;
          if (workload === 'single') {
            singles.push(run);
            console.error(
              `round ${round} 1 worker  ${name.padEnd(13)} p50 ${fixed(run.ticketing.p50Ms)} ms  p99 ` +
                `${fixed(run.ticketing.p99Ms)} ms; raw txn p50 ${fixed(run.rawTxn.p50Ms)} ms  p99 ` +
                `${fixed(run.rawTxn.p99Ms)} ms; ratio ${fixed(run.ratio)}×` +
                (run.errors ? `  errors ${run.errors}` : '') +
                `  ${elapsed()}`,
            );
            continue;
          }
          runs[workload][name].push(run);
          console.error(
            `round ${round} ${workload.padEnd(8)} ${name.padEnd(13)} ${fmt(run.cyclesPerSecond).padStart(7)} cycles/s` +
              `  p50 ${fixed(run.p50Ms)} ms  p99 ${fixed(run.p99Ms)} ms  ops/commit ${fixed(run.opsPerCommit)}` +
              (run.errors ? `  errors ${run.errors}` : '') +
              `  ${elapsed()}`,
          );
        }
      }
    }
    // Failover with the product's default window.
    if (options.kills > 0) failover = await measureFailover(etcd, groups.get(defaultWindow), options);
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await cleanup();
  }
  console.error(`done ${elapsed()}`);
  if (options.rounds === 0) {
    // Only the failover was measured (`--rounds 0 --kills n`): its figures, no table.
    console.log(JSON.stringify({ failover }, null, 2));
    return;
  }
  const context = { options, startedAt, loadAtStart, runs, singles, failover, leaderAtStart };
  const constants = { WORKLOADS, LEADER_TTL, LEASE };
  report({ ...context, systems, defaultWindow, floor, etcdDir: etcd.dir, filesystem, constants });
}

/** Runs each of `config.workloads` in turn (or the one `config.workload`); resolves the results. */
async function runWorkloads(config) {
  if (config.figure === 'floor') return runFloor(config);
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
