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
 * Observers: `npm run bench:ticketing -- --observers [--duration 10s] [--observer-processes 1]`:
 * 1,000 observers of one key changing hands 100 times a second; see observers.mjs.
 *
 *   npm run bench:ticketing -- [--quick] [--rounds 3] [--duration 3s] [--warmup 1s] [--out dir]
 *
 * Both servers are started here (127.0.0.1, free ports) and stopped by PID at the end. redis-server
 * is Debian's (`sh scripts/setup.sh redis` installs it). Results: markdown on
 * stdout, JSON in <out>/results.json (default bench/ticketing/).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { clientRounds } from './clients.mjs';
import { keepMain } from './keep.mjs';
import { findRedis, here, loadavg, startFloor, startRedis, startTicketing, stop } from './processes.mjs';
import {
  buildLoadgen,
  floorSummary,
  floorTable,
  judgeTargets,
  serverRounds,
  serverTable,
  summariseServers,
} from './servers.mjs';

function parseArgs(argv) {
  const options = {
    quick: false,
    keep: false,
    tls: false,
    observers: false,
    observerProcesses: 1,
    rounds: 3,
    durationMs: 3_000,
    warmupMs: 1_000,
    out: here,
  };
  const durations = { '--duration': 'durationMs', '--warmup': 'warmupMs' };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    if (flag === '--quick') {
      Object.assign(options, { quick: true, rounds: 1, durationMs: 200, warmupMs: 100 });
      continue;
    }
    if (flag === '--keep' || flag === '--tls' || flag === '--observers') {
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
    } else if (flag === '--observer-processes') {
      options.observerProcesses = Number.parseInt(value, 10);
      if (!(options.observerProcesses >= 1)) throw new Error('--observer-processes must be a positive integer');
    } else if (flag === '--out') {
      options.out = value;
    } else {
      throw new Error(`unknown flag ${flag}`);
    }
  }
  return options;
}

async function main() {
  const options = parseArgs(process.argv.slice(2));
  if (options.keep) return keepMain(options);
  if (options.tls) return (await import('./tls.mjs')).tlsMain(options);
  if (options.observers) return (await import('./observers.mjs')).observersMain(options);
  const loadgen = buildLoadgen();
  const redisBinary = findRedis();
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

if (process.argv.includes('--cluster')) {
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
