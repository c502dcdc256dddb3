#!/usr/bin/env node
/**
 * Load benchmark: lock cycles (acquire + release) per second and cycle latency (p50/p99) of the
 * ticketing server with its pipelining client, beside the same workload on a local Redis
 * (`SET key value NX PX` + a Lua compare-and-delete, ioredis with auto-pipelining).
 *
 *   npm run bench:ticketing -- [--duration 3s] [--warmup 1s] [--rounds 3] [--workers 64] [--connections 4]
 *   npm run bench:ticketing -- --cluster [--quick] …   (cluster mode on etcd: see cluster.mjs)
 *
 * Workloads (each: `workers` concurrent loops over `connections` TCP connections per system —
 * Redis: that many ioredis connections; ticketing: half as many TicketClients, since each has a
 * pipelined connection and a release lane):
 * - distinct: every loop has its own key (acquire, release, repeat);
 * - hot: every loop wants the same key. Ticketing queues the waiters (FIFO hand-off); Redis has no
 *   queue, so its loops retry SET NX at once until it succeeds (the usual spin).
 * A cycle's latency runs from the acquire call to the release's reply. Each system × workload runs
 * in a fresh child process, `rounds` times; the table shows each cell's median run (by cycles/s).
 * Both servers are started here (127.0.0.1, free ports) and stopped by PID at the end.
 * Results: printed as a markdown table and written to bench/ticketing/results.json.
 */
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { writeFileSync } from 'node:fs';
import net from 'node:net';
import { cpus } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

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

async function runWorker(config) {
  const { system, workload, port, workers, connections, durationMs, warmupMs, prefix } = config;
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
    const clients = Array.from({ length: count }, () => new TicketClient({ port }));
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
  await new Promise((resolve) => setTimeout(resolve, warmupMs));
  measuring = true;
  const started = performance.now();
  await new Promise((resolve) => setTimeout(resolve, durationMs));
  measuring = false;
  const seconds = (performance.now() - started) / 1000;
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
    overlaps,
    failures,
  };
}

// ---------------------------------------------------------------------------------------------
// Orchestration

function parseArgs(argv) {
  const options = { durationMs: 3_000, warmupMs: 1_000, rounds: 3, workers: 64, connections: 4 };
  const durations = { '--duration': 'durationMs', '--warmup': 'warmupMs' };
  const counts = { '--rounds': 'rounds', '--workers': 'workers', '--connections': 'connections' };
  for (let i = 0; i < argv.length; i += 2) {
    const flag = argv[i];
    const value = argv[i + 1];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    if (flag in durations) {
      const m = /^(\d+(?:\.\d+)?)(ms|s)?$/.exec(value);
      if (!m) throw new Error(`${flag}: use e.g. 3s or 500ms`);
      options[durations[flag]] = Number(m[1]) * (m[2] === 'ms' ? 1 : 1000);
    } else if (flag in counts) {
      options[counts[flag]] = Number.parseInt(value, 10);
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
    console.error('redis-server not found: installing Debian\'s redis-server with apt-get …');
    execFileSync('apt-get', ['update', '-qq'], { stdio: 'inherit' });
    execFileSync('apt-get', ['install', '-y', '-qq', 'redis-server'], { stdio: 'inherit', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
    const installed = which('redis-server');
    if (installed) return installed;
  }
  console.error('redis-server is needed as the comparison peer. Install it, e.g.: sudo apt-get install redis-server');
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

async function startTicketing() {
  const child = spawn(process.execPath, [join(root, 'ticketing', 'dist', 'cli.js'), 'serve', '--host', '127.0.0.1', '--port', '0'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let text = '';
  for await (const chunk of child.stdout) {
    text += chunk;
    const m = /^listening (\S+):(\d+)$/m.exec(text);
    if (m) return { child, port: Number(m[2]) };
  }
  throw new Error('ticketing server exited before listening');
}

async function startRedis(binary) {
  const port = await freePort();
  const child = spawn(binary, ['--bind', '127.0.0.1', '--port', String(port), '--save', '', '--appendonly', 'no', '--protected-mode', 'yes'], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
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

async function stop(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  process.kill(child.pid, 'SIGTERM');
  const timer = setTimeout(() => process.kill(child.pid, 'SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
}

async function runInChild(config) {
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

const fmt = (n) => Math.round(n).toLocaleString('en-US');
const ms = (n) => n.toFixed(3);

async function main() {
  const options = parseArgs(process.argv.slice(2));
  const redisBinary = ensureRedis();
  const ticketing = await startTicketing();
  const redis = await startRedis(redisBinary);
  const servers = [ticketing.child, redis.child];
  const cleanup = () => servers.forEach((c) => c.exitCode === null && c.kill('SIGKILL'));
  process.on('SIGINT', () => {
    cleanup();
    process.exit(130);
  });
  const results = { distinct: { ticketing: [], redis: [] }, hot: { ticketing: [], redis: [] } };
  try {
    for (let round = 1; round <= options.rounds; round++) {
      for (const workload of ['distinct', 'hot']) {
        for (const system of ['ticketing', 'redis']) {
          const run = await runInChild({
            system,
            workload,
            port: system === 'ticketing' ? ticketing.port : redis.port,
            workers: options.workers,
            connections: options.connections,
            durationMs: options.durationMs,
            warmupMs: options.warmupMs,
            prefix: `bench${round}${workload}`,
          });
          results[workload][system].push(run);
          console.error(
            `round ${round} ${workload.padEnd(8)} ${system.padEnd(9)} ${fmt(run.cyclesPerSecond).padStart(9)} cycles/s  p50 ${ms(run.p50Ms)} ms  p99 ${ms(run.p99Ms)} ms`,
          );
        }
      }
    }
  } finally {
    await stop(ticketing.child);
    await stop(redis.child);
  }

  const rows = [];
  const summary = {};
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
  const setup = `${options.workers} loops over ${options.connections} TCP connections per system (ticketing: ${Math.max(1, Math.floor(options.connections / 2))} clients × 2 connections), ${options.durationMs / 1000} s per run after ${options.warmupMs / 1000} s warm-up, median of ${options.rounds} runs; ${cpus().length} CPUs, Node ${process.version}`;
  const table = [
    `Lock cycles (acquire + release) — ${setup}`,
    '',
    '| workload | ticketing cycles/s | p50 ms | p99 ms | Redis cycles/s | p50 ms | p99 ms | ratio |',
    '|---|---:|---:|---:|---:|---:|---:|---:|',
    ...rows,
    '',
    `Fencing check: ${violations === 0 ? 'no overlapping holders and no failed release in any run' : `${violations} VIOLATIONS (overlapping holders or failed releases)`}.`,
  ].join('\n');
  console.log(table);
  writeFileSync(
    join(here, 'results.json'),
    `${JSON.stringify({ date: new Date().toISOString(), node: process.version, cpus: cpus().length, options, summary, runs: results }, null, 2)}\n`,
  );
  if (violations > 0) process.exitCode = 1;
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
  import('./cluster.mjs').then((cluster) => cluster.main(process.argv.slice(2))).catch((error) => {
    console.error(error);
    process.exit(1);
  });
} else {
  main().catch((error) => {
    console.error(error);
    process.exit(1);
  });
}
