#!/usr/bin/env node
/**
 * One client benchmark in its own process (processes.mjs's runInChild starts it): one system ×
 * one workload, its config as JSON in argv, its result as JSON on stdout.
 */
import { join } from 'node:path';
import { cpuTimeMs } from '../../ticketing/test/cluster/harness.mjs';
import { readPemFiles, root } from './processes.mjs';

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

  let answered;
  const firstAnswer = new Promise((resolve) => (answered = resolve));
  const loop = async (i) => {
    const key = workload === 'hot' ? `${prefix}:hot` : `${prefix}:k${i}`;
    while (!stop) {
      const t0 = performance.now();
      const done = await acquireRelease(i, key);
      answered();
      if (done && measuring) {
        hist[bucketOf((performance.now() - t0) * 1000)]++;
        cycles++;
      }
    }
  };
  const loops = Array.from({ length: workers }, (_, i) => loop(i));
  // The window starts once the server has answered, so it never holds a connection's handshake,
  // however late this process started.
  await Promise.race([firstAnswer, Promise.all(loops)]);
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

runWorker(JSON.parse(process.argv[2])).then(
  (result) => {
    process.stdout.write(JSON.stringify(result));
    process.exit(0);
  },
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
