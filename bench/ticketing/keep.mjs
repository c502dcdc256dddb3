/** The keep's cost (`npm run bench:ticketing -- --keep`): see bench.mjs. */
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { fmt, loadavg, medianOf, startTicketing, stop } from './processes.mjs';
import { buildLoadgen, loadgenMedians, runLoadgen, SERVER_WORKLOADS } from './servers.mjs';

/** The keep's cost: A+R against A+K+R on one server, interleaved, at distinct 4×16. */
export async function keepMain(options) {
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
    const cell = loadgenMedians(runs[id]);
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
