/**
 * The server-against-server benchmark (bench.mjs's table 1): one load generator in C (loadgen.c,
 * built here) drives Ticketing, Redis and the Node floor with the same loop, systems interleaved
 * in every round; the summary, the targets and their tables.
 */
import { execFile, execFileSync } from 'node:child_process';
import { mkdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fmt, here, medianOf, root } from './processes.mjs';

const LOADGEN_SOURCE = join(here, 'loadgen.c');
const LOADGEN_BIN = join(root, 'native', 'build', 'loadgen');
const CFLAGS = ['-O2', '-Wall', '-Wextra'];

/** Builds native/build/loadgen from loadgen.c (if it is older than the source). */
export function buildLoadgen() {
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
export const SERVER_WORKLOADS = [
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

export function runLoadgen(system, workload, server, options, prefix) {
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
    // A secret (`system.secret`) goes in the environment, never in argv.
    const env = system.secret === undefined ? process.env : { ...process.env, LOADGEN_SECRET: system.secret };
    execFile(LOADGEN_BIN, args, { timeout, env }, (error, stdout, stderr) => {
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

/** One side's load generator runs over rounds: the medians (and the cycles/s range), and the
 * refused or failed cycles in all. */
export function loadgenMedians(list) {
  const m = (f) => medianOf(list.map(f));
  return {
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

/** Per-metric medians over rounds, and the medians of the per-round ratios against ticketing (for the
 * Node floor also its own against each Redis system). */
export function summariseServers(runs) {
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
export function judgeTargets(summary) {
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

export function serverTable(summary) {
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
export function floorTable(summary) {
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
export function floorSummary(summary) {
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

/** Table 1: both servers under the same C load generator, systems interleaved in every round. */
export async function serverRounds(options, servers) {
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
