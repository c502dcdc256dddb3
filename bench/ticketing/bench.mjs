#!/usr/bin/env node
/**
 * Ticketing against Redis, two tables (docs/ticketing-bench.md):
 *
 * 1. Server against server. One load generator in C (loadgen.c, built here with the system
 *    compiler) drives both servers with the same loop: one thread, raw epoll, one read() per ready
 *    connection, every complete reply handled, all the requests they trigger sent in one write().
 *    Ticketing: `A key owner wait` / `R key token`; Redis: `SET key value NX PX 30000` + a
 *    compare-and-delete EVALSHA, on the hot key either retried at once or after 1 ms. Reported:
 *    cycles/s, p50/p99 cycle latency, server CPU per cycle (utime+stime of /proc/<pid>/stat, all
 *    threads) and the load generator's CPU per cycle. Rounds interleave the systems; each cell is
 *    the median over rounds, each ratio the median of the rounds' ratios. On the workloads with a
 *    cycles/s target a further server runs too, the Node floor, a bare server (bare-server.mjs): the same node:net
 *    socket set-up answering the same requests with no state machine (on the distinct keys no lock
 *    table at all, on the hot key a FIFO of waiters), i.e. what Node itself costs per read and
 *    write; its own table says how far Redis and Ticketing are from it.
 * 2. Client library against client library (what an application sees end to end): our
 *    TicketClient against ioredis with auto-pipelining, 64 loops over 4 connections, distinct keys
 *    and one hot key (Redis loops retry SET NX at once), each run in a fresh Node process.
 *
 * Cluster mode: `npm run bench:ticketing -- --cluster [--quick]` (etcd, three nodes, failover): see cluster.mjs.
 *
 * The keep's cost: `npm run bench:ticketing -- --keep [--rounds 7]` drives one Ticketing server with
 * the same load generator at distinct 4×16 in two cycles, A+R and A+K+R (`K key token` between the
 * grant and the release), alternating which goes first in each round; reports cycles/s, the ratio
 * (median and range of the rounds' ratios) and each process's CPU (server, load generator).
 *
 * TLS's cost: `npm run bench:ticketing -- --tls [--rounds 5]`: see tls.mjs.
 *
 *   npm run bench:ticketing -- [--quick] [--rounds 3] [--duration 3s] [--warmup 1s] [--out dir]
 *
 * Both servers are started here (127.0.0.1, free ports) and stopped by PID at the end. redis-server
 * is Debian's (installed with apt-get when missing and running as root). Results: markdown on
 * stdout, JSON in <out>/results.json (default bench/ticketing/).
 */
import { execFile, execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { cpus } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cpuTimeMs } from '../../ticketing/test/cluster/harness.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..');

// ---------------------------------------------------------------------------------------------
// Latency histogram: log-linear, 64 sub-buckets per power of two of microseconds (< 1.6 % error).
// Small on purpose: a large typed array written per sample changes V8's young-generation
// behaviour and would measure the harness, not the systems.

const SUB = 64;
const BUCKETS = SUB * 40;
function bucketOf(us) {
  if (us < SUB) return Math.max(0, Math.floor(us));
  const exp = Math.floor(Math.log2(us / SUB));
  const base = SUB * 2 ** exp;
  return Math.min(BUCKETS - 1, SUB + exp * SUB + Math.floor((us - base) / 2 ** exp));
}
function valueOf(bucket) {
  if (bucket < SUB) return bucket + 1;
  const exp = Math.floor((bucket - SUB) / SUB);
  const offset = (bucket - SUB) % SUB;
  return SUB * 2 ** exp + (offset + 1) * 2 ** exp;
}
function percentile(hist, total, q) {
  const rank = Math.ceil(total * q);
  let seen = 0;
  for (let b = 0; b < hist.length; b++) {
    seen += hist[b];
    if (seen >= rank) return valueOf(b) / 1000; // ms
  }
  return NaN;
}

// ---------------------------------------------------------------------------------------------
// Worker process: one system × one workload.

/** tls.connect options from `{ ca, cert, key }` PEM file paths (a worker's config is JSON, so paths). */
export function readPemFiles(files) {
  return Object.fromEntries(Object.entries(files).map(([field, file]) => [field, readFileSync(file)]));
}

async function runWorker(config) {
  const { system, workload, port, workers, connections, durationMs, warmupMs, prefix, tls, serverPid, measureAt } =
    config;
  const hist = new Uint32Array(BUCKETS);
  let measuring = false;
  let stop = false;
  let cycles = 0;
  let holders = 0;
  let overlaps = 0;
  let failures = 0;

  let lastToken = 0n;
  // Holders of the hot key, counted across a yield: two at once would be a safety violation.
  const criticalSection = async () => {
    if (workload !== 'hot') return;
    if (++holders > 1) overlaps++;
    await undefined;
    holders--;
  };
  let acquireRelease;
  let closeAll;
  if (system === 'ticketing') {
    const { TicketClient } = await import(join(root, 'ticketing', 'dist', 'index.js'));
    // `connections` counts TCP sockets: each TicketClient has two (its pipelined connection and
    // its release lane), so half as many clients.
    const count = Math.max(1, Math.floor(connections / 2));
    const tlsOptions = tls && readPemFiles(tls);
    const clients = Array.from({ length: count }, () => new TicketClient({ port, tls: tlsOptions }));
    acquireRelease = async (i, key) => {
      const client = clients[i % count];
      const result = await client.acquire(key, { waitMs: 60_000 });
      if (result.status !== 'acquired') {
        failures++;
        return false;
      }
      // Fencing check: on the hot key every grant's token must exceed the previous grant's.
      if (workload === 'hot') {
        if (result.token <= lastToken) overlaps++;
        lastToken = result.token;
      }
      await criticalSection();
      const released = await client.release(key, result.token);
      if (released.status !== 'released') failures++;
      return true;
    };
    closeAll = () => Promise.all(clients.map((c) => c.close()));
  } else {
    const { default: Redis } = await import('ioredis');
    const clients = Array.from({ length: connections }, () => {
      const redis = new Redis({ host: '127.0.0.1', port, enableAutoPipelining: true, lazyConnect: false });
      redis.defineCommand('compareAndDelete', {
        numberOfKeys: 1,
        lua: "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end",
      });
      return redis;
    });
    await Promise.all(clients.map((c) => c.ping()));
    let seq = 0;
    acquireRelease = async (i, key) => {
      const redis = clients[i % connections];
      const value = `${process.pid}-${++seq}`;
      while ((await redis.set(key, value, 'PX', 30_000, 'NX')) !== 'OK') {
        if (stop) return false;
      }
      await criticalSection();
      if ((await redis.compareAndDelete(key, value)) !== 1) failures++;
      return true;
    };
    closeAll = async () => {
      for (const c of clients) c.disconnect();
    };
  }

  const loop = async (i) => {
    const key = workload === 'hot' ? `${prefix}:hot` : `${prefix}:k${i}`;
    while (!stop) {
      const t0 = performance.now();
      const done = await acquireRelease(i, key);
      if (done && measuring) {
        hist[bucketOf((performance.now() - t0) * 1000)]++;
        cycles++;
      }
    }
  };
  const loops = Array.from({ length: workers }, (_, i) => loop(i));
  const loadedAt = Date.now();
  // Processes that measure together share one window: from `measureAt` (epoch ms) when given.
  const warmup = measureAt === undefined ? warmupMs : Math.max(0, measureAt - loadedAt);
  await new Promise((resolve) => setTimeout(resolve, warmup));
  // CPU over the measured window (/proc/<pid>/stat, all threads): this process's, and the server's
  // when its pid is given.
  const cpuNow = () => ({ own: cpuTimeMs(process.pid), server: serverPid && cpuTimeMs(serverPid) });
  const cpuStart = cpuNow();
  measuring = true;
  const started = performance.now();
  await new Promise((resolve) => setTimeout(resolve, durationMs));
  measuring = false;
  const seconds = (performance.now() - started) / 1000;
  const cpuEnd = cpuNow();
  stop = true;
  await Promise.all(loops);
  await closeAll();
  return {
    system,
    workload,
    cycles,
    cyclesPerSecond: cycles / seconds,
    p50Ms: percentile(hist, cycles, 0.5),
    p99Ms: percentile(hist, cycles, 0.99),
    p999Ms: percentile(hist, cycles, 0.999),
    seconds,
    warmedMs: warmup,
    cpuMs: cpuEnd.own - cpuStart.own,
    serverCpuMs: serverPid ? cpuEnd.server - cpuStart.server : undefined,
    overlaps,
    failures,
  };
}

// ---------------------------------------------------------------------------------------------
// Orchestration

const LOADGEN_SOURCE = join(here, 'loadgen.c');
const LOADGEN_BIN = join(root, 'native', 'build', 'loadgen');
const CFLAGS = ['-O2', '-Wall', '-Wextra'];

/** Builds native/build/loadgen from loadgen.c (if it is older than the source). */
function buildLoadgen() {
  let fresh = false;
  try {
    fresh = statSync(LOADGEN_BIN).mtimeMs >= statSync(LOADGEN_SOURCE).mtimeMs;
  } catch {
    // not built yet
  }
  const cc = process.env.CC || 'cc';
  if (!fresh) {
    mkdirSync(dirname(LOADGEN_BIN), { recursive: true });
    execFileSync(cc, [...CFLAGS, '-o', LOADGEN_BIN, LOADGEN_SOURCE, '-lm'], { stdio: 'inherit' });
  }
  return { compiler: execFileSync(cc, ['--version'], { encoding: 'utf8' }).split('\n')[0], flags: CFLAGS.join(' ') };
}

const FLOOR = 'node floor';

/** The server-against-server workloads. Redis variants: backoffUs 0 retries a failed SET at once.
 * `floor`: which Node floor runs too, on the workloads the targets judge ('plain': grants at once;
 * 'fifo': queues the hot key's waiters). */
const SERVER_WORKLOADS = [
  { id: 'distinct 4×1', keys: 'distinct', conns: 4, inflight: 1, floor: 'plain' },
  { id: 'distinct 4×16', keys: 'distinct', conns: 4, inflight: 16, floor: 'plain' },
  { id: 'distinct 4×64', keys: 'distinct', conns: 4, inflight: 64, floor: 'plain' },
  { id: 'distinct 16×64', keys: 'distinct', conns: 16, inflight: 64 },
  { id: 'hot 4×16', keys: 'hot', conns: 4, inflight: 16, floor: 'fifo' },
  { id: 'hot 64×1', keys: 'hot', conns: 64, inflight: 1 },
];

/** Issue 13's cycles/s targets: Ticketing ÷ the Redis system of the workload, at least `wanted`. */
const CYCLE_TARGETS = [
  { workload: 'distinct 4×1', redis: 'redis', wanted: 0.8 },
  { workload: 'distinct 4×16', redis: 'redis', wanted: 1.25 },
  { workload: 'distinct 4×64', redis: 'redis', wanted: 1.25 },
  { workload: 'hot 4×16', redis: 'redis 1 ms', wanted: 1.5, label: 'vs 1 ms back-off' },
  { workload: 'hot 4×16', redis: 'redis retry', wanted: 2, label: 'vs retry at once' },
];
function systemsOf(workload) {
  const systems = [
    { id: 'ticketing', server: 'ticketing', backoffUs: 0 },
    { id: 'redis', server: 'redis', backoffUs: 0 },
  ];
  if (workload.keys === 'hot') {
    systems[1] = { id: 'redis retry', server: 'redis', backoffUs: 0 };
    systems.push({ id: 'redis 1 ms', server: 'redis', backoffUs: 1000 });
  }
  // It speaks the Ticketing protocol, so the load generator drives it as Ticketing.
  if (workload.floor) systems.push({ id: FLOOR, server: `floor ${workload.floor}`, proto: 'ticketing', backoffUs: 0 });
  return systems;
}

function runLoadgen(system, workload, server, options, prefix) {
  const args = [
    system.proto ?? system.server,
    String(server.port),
    String(workload.conns),
    String(workload.inflight),
    workload.keys,
    String(options.warmupMs),
    String(options.durationMs),
    String(system.backoffUs),
    String(server.child.pid),
    prefix,
  ];
  return new Promise((resolve, reject) => {
    const timeout = options.warmupMs + options.durationMs + 30_000;
    execFile(LOADGEN_BIN, args, { timeout }, (error, stdout, stderr) => {
      if (error)
        reject(Object.assign(new Error(`loadgen ${args.join(' ')}: ${stderr || error.message}`), { cause: error }));
      else {
        try {
          resolve(JSON.parse(stdout));
        } catch (parseError) {
          reject(parseError);
        }
      }
    });
  });
}

const METRICS = [
  'cyclesPerSecond',
  'p50Us',
  'p99Us',
  'serverUserUsPerCycle',
  'serverSysUsPerCycle',
  'clientUserUsPerCycle',
  'clientSysUsPerCycle',
  'serverCpuShare',
  'failedAcquiresPerCycle',
  'readsPerCycle',
  'writesPerCycle',
];

export function medianOf(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/** Per-metric medians over rounds, and the medians of the per-round ratios against ticketing (for the
 * Node floor also its own against each Redis system). */
function summariseServers(runs) {
  const summary = {};
  for (const workload of SERVER_WORKLOADS) {
    const bySystem = runs[workload.id];
    const cell = {};
    for (const [system, list] of Object.entries(bySystem)) {
      const median = {};
      for (const metric of METRICS) median[metric] = medianOf(list.map((run) => run[metric]));
      median.serverUsPerCycle = medianOf(list.map((run) => run.serverUserUsPerCycle + run.serverSysUsPerCycle));
      median.clientUsPerCycle = medianOf(list.map((run) => run.clientUserUsPerCycle + run.clientSysUsPerCycle));
      median.failures = list.reduce((n, run) => n + run.failures, 0);
      cell[system] = median;
    }
    const t = bySystem.ticketing;
    for (const system of Object.keys(bySystem).filter((s) => s !== 'ticketing')) {
      cell[system].ratio = ratiosOf(t, bySystem[system]);
    }
    if (bySystem[FLOOR]) {
      cell[FLOOR].vsRedis = {};
      for (const system of Object.keys(bySystem).filter((s) => s.startsWith('redis')))
        cell[FLOOR].vsRedis[system] = ratiosOf(bySystem[FLOOR], bySystem[system]);
    }
    summary[workload.id] = cell;
  }
  return summary;
}

/** Medians of the per-round ratios a ÷ b. */
function ratiosOf(a, b) {
  const cpu = (run) => run.serverUserUsPerCycle + run.serverSysUsPerCycle;
  return {
    cyclesPerSecond: medianOf(a.map((run, i) => run.cyclesPerSecond / b[i].cyclesPerSecond)),
    serverCpuPerCycle: medianOf(a.map((run, i) => cpu(run) / cpu(b[i]))),
    p99: medianOf(a.map((run, i) => run.p99Us / b[i].p99Us)),
  };
}

/** The targets of issue 13, judged on the summary. */
function judgeTargets(summary) {
  const targets = [];
  const add = (id, measured, target, met) => targets.push({ id, measured, target, met });
  for (const { workload, redis, wanted, label } of CYCLE_TARGETS) {
    const r = summary[workload][redis].ratio;
    const name = label === undefined ? workload : `${workload} ${label}`;
    add(`${name} cycles/s`, r.cyclesPerSecond, `≥ ${wanted}× Redis`, r.cyclesPerSecond >= wanted);
    // The distinct keys' CPU target; the hot key's is its p99 (a hand-off queue against spinning).
    if (workload.startsWith('distinct') && workload !== 'distinct 4×1')
      add(`${name} server CPU/cycle`, r.serverCpuPerCycle, '≤ 0.8× Redis', r.serverCpuPerCycle <= 0.8);
    if (workload.startsWith('hot')) add(`${name} p99`, r.p99, '< 1× Redis', r.p99 < 1);
  }
  return targets;
}

function serverTable(summary) {
  const rows = [
    '| workload | system | cycles/s | p50 µs | p99 µs | server CPU µs/cycle (user + sys) | load generator CPU µs/cycle | failed SETs/cycle | ratio cycles/s | ratio server CPU |',
    '|---|---|--:|--:|--:|--:|--:|--:|--:|--:|',
  ];
  for (const workload of SERVER_WORKLOADS) {
    for (const [system, m] of Object.entries(summary[workload.id])) {
      const failed = system.startsWith('redis') ? m.failedAcquiresPerCycle.toFixed(1) : '—';
      const ratio = m.ratio ? `${m.ratio.cyclesPerSecond.toFixed(2)}×` : '';
      const cpuRatio = m.ratio ? `${m.ratio.serverCpuPerCycle.toFixed(2)}×` : '';
      rows.push(
        `| ${workload.id} | ${system} | ${fmt(m.cyclesPerSecond)} | ${Math.round(m.p50Us)} | ${Math.round(m.p99Us)} | ` +
          `${m.serverUsPerCycle.toFixed(1)} (${m.serverUserUsPerCycle.toFixed(1)} + ${m.serverSysUsPerCycle.toFixed(1)}) | ` +
          `${m.clientUsPerCycle.toFixed(1)} | ${failed} | ${ratio} | ${cpuRatio} |`,
      );
    }
  }
  return rows.join('\n');
}

/** The Node floor against Redis (could any node:net server reach the target?) and Ticketing against it. */
function floorTable(summary) {
  const rows = [
    '| workload | against | node floor cycles/s | floor ÷ Redis cycles/s | floor ÷ Redis server CPU | target (cycles/s) | floor reaches it | Ticketing ÷ floor cycles/s | Ticketing ÷ floor server CPU |',
    '|---|---|--:|--:|--:|--:|---|--:|--:|',
  ];
  for (const { workload, redis, wanted } of CYCLE_TARGETS) {
    const f = summary[workload][FLOOR];
    const vs = f.vsRedis[redis];
    rows.push(
      `| ${workload} | ${redis} | ${fmt(f.cyclesPerSecond)} | ${vs.cyclesPerSecond.toFixed(2)}× | ${vs.serverCpuPerCycle.toFixed(2)}× | ` +
        `≥ ${wanted}× Redis | ${vs.cyclesPerSecond >= wanted ? 'yes' : 'no'} | ${f.ratio.cyclesPerSecond.toFixed(2)}× | ${f.ratio.serverCpuPerCycle.toFixed(2)}× |`,
    );
  }
  return rows.join('\n');
}

/** The floor table's figures, for the JSON. */
function floorSummary(summary) {
  const floor = {};
  for (const workload of SERVER_WORKLOADS.filter((w) => w.floor)) {
    const f = summary[workload.id][FLOOR];
    floor[workload.id] = {
      cyclesPerSecond: f.cyclesPerSecond,
      serverUsPerCycle: f.serverUsPerCycle,
      vsRedis: f.vsRedis,
      ticketingVsFloor: f.ratio,
    };
  }
  return floor;
}

function parseArgs(argv) {
  const options = { quick: false, keep: false, tls: false, rounds: 3, durationMs: 3_000, warmupMs: 1_000, out: here };
  const durations = { '--duration': 'durationMs', '--warmup': 'warmupMs' };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    if (flag === '--quick') {
      Object.assign(options, { quick: true, rounds: 1, durationMs: 400, warmupMs: 200 });
      continue;
    }
    if (flag === '--keep' || flag === '--tls') {
      options[flag.slice(2)] = true;
      continue;
    }
    const value = argv[++i];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    if (flag in durations) {
      const m = /^(\d+(?:\.\d+)?)(ms|s)?$/.exec(value);
      if (!m) throw new Error(`${flag}: use e.g. 3s or 500ms`);
      options[durations[flag]] = Number(m[1]) * (m[2] === 'ms' ? 1 : 1000);
    } else if (flag === '--rounds') {
      options.rounds = Number.parseInt(value, 10);
      if (!(options.rounds >= 1)) throw new Error('--rounds must be a positive integer');
    } else if (flag === '--out') {
      options.out = value;
    } else {
      throw new Error(`unknown flag ${flag}`);
    }
  }
  return options;
}

function which(command) {
  try {
    return execFileSync('sh', ['-c', `command -v ${command}`], { encoding: 'utf8' }).trim() || undefined;
  } catch {
    return undefined;
  }
}

function ensureRedis() {
  const found = which('redis-server');
  if (found) return found;
  if (process.getuid?.() === 0) {
    console.error("redis-server not found: installing Debian's redis-server (scripts/setup.sh redis) …");
    execFileSync('sh', [join(root, 'scripts', 'setup.sh'), 'redis'], { stdio: 'inherit' });
    const installed = which('redis-server');
    if (installed) return installed;
  }
  console.error(
    'bench:ticketing needs redis-server (the comparison peer) on PATH. On Debian/Ubuntu: ' +
      'sudo apt-get update && sudo apt-get install -y redis-server (the benchmark starts its own instance on a free ' +
      'loopback port; the system service need not run).',
  );
  process.exit(2);
}

async function freePort() {
  const server = net.createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Starts a Node server script that prints `listening host:port`; `name` for the error. */
async function startListening(name, args) {
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  let text = '';
  for await (const chunk of child.stdout) {
    text += chunk;
    const m = /^listening (\S+):(\d+)$/m.exec(text);
    if (m) return { child, port: Number(m[2]) };
  }
  throw new Error(`${name} exited before listening`);
}

/** A `ticketing serve` on a free loopback port; `flags` are further serve flags (e.g. TLS's). */
export function startTicketing(...flags) {
  const cli = join(root, 'ticketing', 'dist', 'cli.js');
  return startListening('ticketing server', [cli, 'serve', '--host', '127.0.0.1', '--port', '0', ...flags]);
}

/** The Node floor, a bare server (bare-server.mjs; `--fifo` for the hot key), started like the Ticketing server. */
function startFloor(...flags) {
  return startListening('node floor server', [join(here, 'bare-server.mjs'), ...flags]);
}

async function startRedis(binary) {
  const port = await freePort();
  const args = [
    '--bind',
    '127.0.0.1',
    '--port',
    String(port),
    '--save',
    '',
    '--appendonly',
    'no',
    '--protected-mode',
    'yes',
  ];
  const child = spawn(binary, args, { stdio: ['ignore', 'ignore', 'inherit'] });
  for (let i = 0; i < 100; i++) {
    try {
      const socket = net.connect(port, '127.0.0.1');
      await once(socket, 'connect');
      socket.write('PING\r\n');
      const [data] = await once(socket, 'data');
      socket.destroy();
      if (String(data).startsWith('+PONG')) return { child, port };
    } catch {
      // not up yet
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  child.kill('SIGKILL');
  throw new Error('redis-server did not answer PING');
}

export async function stop(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  process.kill(child.pid, 'SIGTERM');
  const timer = setTimeout(() => process.kill(child.pid, 'SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
}

export async function runInChild(config) {
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), '--worker', JSON.stringify(config)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.on('data', (chunk) => (out += chunk));
  const [code] = await once(child, 'exit');
  if (code !== 0) throw new Error(`benchmark worker ${config.system}/${config.workload} failed (exit ${code})`);
  return JSON.parse(out);
}

function median(runs) {
  const sorted = [...runs].sort((a, b) => a.cyclesPerSecond - b.cyclesPerSecond);
  return sorted[Math.floor((sorted.length - 1) / 2)];
}

export const fmt = (n) => Math.round(n).toLocaleString('en-US');
const ms = (n) => n.toFixed(3);
export const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).map(Number);

/** Table 1: both servers under the same C load generator, systems interleaved in every round. */
async function serverRounds(options, servers) {
  const runs = {};
  for (const workload of SERVER_WORKLOADS) runs[workload.id] = {};
  for (let round = 1; round <= options.rounds; round++) {
    for (const workload of SERVER_WORKLOADS) {
      const systems = systemsOf(workload);
      // Alternate who goes first, so a drift in the machine's load does not favour one system.
      if (round % 2 === 0) systems.reverse();
      for (const system of systems) {
        const prefix = `b${round}${workload.keys[0]}${workload.conns}x${workload.inflight}${system.backoffUs ? 'w' : ''}`;
        const run = await runLoadgen(system, workload, servers[system.server], options, prefix);
        (runs[workload.id][system.id] ??= []).push(run);
        console.error(
          `round ${round} ${workload.id.padEnd(15)} ${system.id.padEnd(11)} ${fmt(run.cyclesPerSecond).padStart(9)} cycles/s  ` +
            `p99 ${Math.round(run.p99Us)} µs  server ${(run.serverUserUsPerCycle + run.serverSysUsPerCycle).toFixed(1)} µs/cycle`,
        );
      }
    }
  }
  return runs;
}

/** Table 2: the two client libraries, each system × workload in a fresh Node process. */
async function clientRounds(options, servers) {
  const results = { distinct: { ticketing: [], redis: [] }, hot: { ticketing: [], redis: [] } };
  const workers = 64;
  const connections = 4;
  for (let round = 1; round <= options.rounds; round++) {
    for (const workload of ['distinct', 'hot']) {
      for (const system of round % 2 === 0 ? ['redis', 'ticketing'] : ['ticketing', 'redis']) {
        const run = await runInChild({
          system,
          workload,
          port: servers[system].port,
          workers,
          connections,
          durationMs: options.durationMs,
          warmupMs: options.warmupMs,
          prefix: `c${round}${workload}`,
        });
        results[workload][system].push(run);
        console.error(
          `round ${round} clients ${workload.padEnd(8)} ${system.padEnd(9)} ${fmt(run.cyclesPerSecond).padStart(9)} cycles/s  p99 ${ms(run.p99Ms)} ms`,
        );
      }
    }
  }
  const summary = {};
  const rows = [];
  for (const workload of ['distinct', 'hot']) {
    const t = median(results[workload].ticketing);
    const r = median(results[workload].redis);
    summary[workload] = { ticketing: t, redis: r, ratio: t.cyclesPerSecond / r.cyclesPerSecond };
    rows.push(
      `| ${workload} | ${fmt(t.cyclesPerSecond)} | ${ms(t.p50Ms)} | ${ms(t.p99Ms)} | ${fmt(r.cyclesPerSecond)} | ${ms(r.p50Ms)} | ${ms(r.p99Ms)} | ${(t.cyclesPerSecond / r.cyclesPerSecond).toFixed(2)}× |`,
    );
  }
  const violations = Object.values(results)
    .flatMap((bySystem) => Object.values(bySystem).flat())
    .reduce((n, run) => n + run.overlaps + run.failures, 0);
  const table = [
    '| workload | TicketClient cycles/s | p50 ms | p99 ms | ioredis cycles/s | p50 ms | p99 ms | ratio |',
    '|---|--:|--:|--:|--:|--:|--:|--:|',
    ...rows,
    '',
    `Fencing check: ${violations === 0 ? 'no overlapping holders and no failed release in any run' : `${violations} VIOLATIONS (overlapping holders or failed releases)`}.`,
  ].join('\n');
  return { setup: { workers, connections }, runs: results, summary, table, violations };
}

/** The keep's cost: A+R against A+K+R on one server, interleaved, at distinct 4×16. */
async function keepMain(options) {
  const loadgen = buildLoadgen();
  const workload = SERVER_WORKLOADS.find((w) => w.id === 'distinct 4×16');
  const cycles = [
    { id: 'A+R', proto: 'ticketing', backoffUs: 0 },
    { id: 'A+K+R', proto: 'ticketing-keep', backoffUs: 0 },
  ];
  const loadStart = loadavg();
  const server = await startTicketing();
  const runs = { 'A+R': [], 'A+K+R': [] };
  try {
    for (let round = 1; round <= options.rounds; round++) {
      for (const cycle of round % 2 === 0 ? [...cycles].reverse() : cycles) {
        const prefix = `k${round}${cycle.id === 'A+R' ? 'p' : 'k'}`;
        const run = await runLoadgen(cycle, workload, server, options, prefix);
        runs[cycle.id].push(run);
        console.error(
          `round ${round} ${cycle.id.padEnd(6)} ${fmt(run.cyclesPerSecond).padStart(9)} cycles/s  p99 ${Math.round(run.p99Us)} µs  ` +
            `server ${(run.serverUserUsPerCycle + run.serverSysUsPerCycle).toFixed(1)} µs/cycle (${(100 * run.serverCpuShare).toFixed(0)} % CPU)  ` +
            `loadgen ${(run.clientUserUsPerCycle + run.clientSysUsPerCycle).toFixed(1)} µs/cycle (${(100 * run.clientCpuShare).toFixed(0)} % CPU)`,
        );
      }
    }
  } finally {
    await stop(server.child);
  }
  const loadEnd = loadavg();
  const ratios = runs['A+K+R'].map((run, i) => run.cyclesPerSecond / runs['A+R'][i].cyclesPerSecond);
  const cpuRatios = runs['A+K+R'].map(
    (run, i) =>
      (run.serverUserUsPerCycle + run.serverSysUsPerCycle) /
      (runs['A+R'][i].serverUserUsPerCycle + runs['A+R'][i].serverSysUsPerCycle),
  );
  const summary = {};
  const rows = [
    '| cycle | cycles/s (median) | cycles/s range | p99 µs | server CPU µs/cycle (user + sys) | server CPU share | load generator CPU µs/cycle | load generator CPU share |',
    '|---|--:|--:|--:|--:|--:|--:|--:|',
  ];
  for (const { id } of cycles) {
    const list = runs[id];
    const m = (f) => medianOf(list.map(f));
    const cell = {
      cyclesPerSecond: m((r) => r.cyclesPerSecond),
      min: Math.min(...list.map((r) => r.cyclesPerSecond)),
      max: Math.max(...list.map((r) => r.cyclesPerSecond)),
      p99Us: m((r) => r.p99Us),
      serverUserUsPerCycle: m((r) => r.serverUserUsPerCycle),
      serverSysUsPerCycle: m((r) => r.serverSysUsPerCycle),
      serverCpuShare: m((r) => r.serverCpuShare),
      clientUsPerCycle: m((r) => r.clientUserUsPerCycle + r.clientSysUsPerCycle),
      clientCpuShare: m((r) => r.clientCpuShare),
      failures: list.reduce((n, r) => n + r.failures, 0),
    };
    summary[id] = cell;
    rows.push(
      `| ${id} | ${fmt(cell.cyclesPerSecond)} | ${fmt(cell.min)}–${fmt(cell.max)} | ${Math.round(cell.p99Us)} | ` +
        `${(cell.serverUserUsPerCycle + cell.serverSysUsPerCycle).toFixed(1)} (${cell.serverUserUsPerCycle.toFixed(1)} + ${cell.serverSysUsPerCycle.toFixed(1)}) | ` +
        `${(100 * cell.serverCpuShare).toFixed(0)} % | ${cell.clientUsPerCycle.toFixed(1)} | ${(100 * cell.clientCpuShare).toFixed(0)} % |`,
    );
  }
  summary.ratio = {
    cyclesPerSecond: medianOf(ratios),
    min: Math.min(...ratios),
    max: Math.max(...ratios),
    serverCpuPerCycle: medianOf(cpuRatios),
  };
  const failures = summary['A+R'].failures + summary['A+K+R'].failures;
  const run = `${options.durationMs / 1000} s per run after ${options.warmupMs / 1000} s warm-up, ${options.rounds} interleaved round(s)`;
  console.log(
    [
      `### The keep's cost: A+K+R against A+R, distinct 4×16 (one C load generator; ${run})`,
      '',
      `${cpus().length} CPUs, Node ${process.version}; load average ${loadStart[0]} at start, ${loadEnd[0]} at end. Medians over rounds.`,
      '',
      ...rows,
      '',
      `A+K+R ÷ A+R cycles/s: ${summary.ratio.cyclesPerSecond.toFixed(3)}× (rounds ${summary.ratio.min.toFixed(3)}–${summary.ratio.max.toFixed(3)}); ` +
        `server CPU per cycle ${summary.ratio.serverCpuPerCycle.toFixed(3)}×.`,
      '',
      `Check: ${failures === 0 ? 'every keep was K and every release R in every run' : `${failures} G, N, T or B replies`}.`,
    ].join('\n'),
  );
  mkdirSync(options.out, { recursive: true });
  writeFileSync(
    join(options.out, 'keep-results.json'),
    `${JSON.stringify({ date: new Date().toISOString(), machine: { cpus: cpus().length, node: process.version, loadgen }, load: { start: loadStart, end: loadEnd }, options, summary, runs }, null, 2)}\n`,
  );
  if (failures > 0) process.exitCode = 1;
}

async function main() {
  const options = parseArgs(process.argv.slice(2));
  if (options.keep) return keepMain(options);
  if (options.tls) return (await import('./tls.mjs')).tlsMain(options);
  const loadgen = buildLoadgen();
  const redisBinary = ensureRedis();
  const redisVersion = execFileSync(redisBinary, ['--version'], { encoding: 'utf8' }).trim();
  const loadStart = loadavg();
  const ticketing = await startTicketing();
  const redis = await startRedis(redisBinary);
  const servers = {
    ticketing,
    redis,
    'floor plain': await startFloor(),
    'floor fifo': await startFloor('--fifo'),
  };
  const cleanup = () =>
    Object.values(servers).forEach((server) => server.child.exitCode === null && server.child.kill('SIGKILL'));
  process.on('SIGINT', () => {
    cleanup();
    process.exit(130);
  });
  let serverRuns;
  let clients;
  try {
    serverRuns = await serverRounds(options, servers);
    clients = await clientRounds(options, servers);
  } finally {
    for (const server of Object.values(servers)) await stop(server.child);
  }
  const loadEnd = loadavg();
  const summary = summariseServers(serverRuns);
  const targets = judgeTargets(summary);
  const serverFailures = Object.values(serverRuns)
    .flatMap((bySystem) => Object.values(bySystem).flat())
    .reduce((n, run) => n + run.failures, 0);
  const machine = `${cpus().length} CPUs, Node ${process.version}, ${redisVersion.split(' ').slice(0, 3).join(' ')}`;
  const run = `${options.durationMs / 1000} s per run after ${options.warmupMs / 1000} s warm-up, ${options.rounds} interleaved round(s)`;
  const output = [
    `### Server against server (one C load generator for both; ${run})`,
    '',
    `${machine}; load average ${loadStart[0]} at start, ${loadEnd[0]} at end. Medians over rounds; ratios are Ticketing ÷ the row's system (Redis, or the Node floor), medians of the rounds' ratios.`,
    '',
    serverTable(summary),
    '',
    '| target | measured | wanted | met |',
    '|---|--:|---|---|',
    ...targets.map((t) => `| ${t.id} | ${t.measured.toFixed(2)}× | ${t.target} | ${t.met ? 'yes' : 'no'} |`),
    '',
    `Release check: ${serverFailures === 0 ? 'every release matched its grant in every run' : `${serverFailures} FAILED releases or refused acquires`}.`,
    '',
    `Node floor (a bare server, bench/ticketing/bare-server.mjs: node:net with the server's socket options, reading and writing, no state machine; on the hot key a FIFO of waiters per key): what any Node server pays per read and write.`,
    '',
    floorTable(summary),
    '',
    `### Client library against client library (TicketClient vs ioredis, ${clients.setup.workers} loops over ${clients.setup.connections} connections; ${run})`,
    '',
    clients.table,
  ].join('\n');
  console.log(output);
  mkdirSync(options.out, { recursive: true });
  writeFileSync(
    join(options.out, 'results.json'),
    `${JSON.stringify(
      {
        date: new Date().toISOString(),
        mode: options.quick ? 'quick' : 'full',
        machine: { cpus: cpus().length, node: process.version, redis: redisVersion, loadgen },
        load: { start: loadStart, end: loadEnd },
        options,
        servers: { summary, targets, floor: floorSummary(summary), runs: serverRuns },
        clients: { summary: clients.summary, runs: clients.runs },
      },
      null,
      2,
    )}\n`,
  );
  if (clients.violations > 0 || serverFailures > 0) process.exitCode = 1;
}

if (process.argv[2] === '--worker') {
  runWorker(JSON.parse(process.argv[3])).then(
    (result) => {
      process.stdout.write(JSON.stringify(result));
      process.exit(0);
    },
    (error) => {
      console.error(error);
      process.exit(1);
    },
  );
} else if (process.argv.includes('--cluster')) {
  // Cluster mode has its own harness (etcd, three nodes, failover): bench/ticketing/cluster.mjs.
  import('./cluster.mjs')
    .then((cluster) => cluster.main(process.argv.slice(2)))
    .catch((error) => {
      console.error(error);
      process.exit(1);
    });
} else {
  main().catch((error) => {
    console.error(error);
    process.exit(1);
  });
}
