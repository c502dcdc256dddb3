/** The client-library benchmark (bench.mjs's table 2): TicketClient against ioredis, each system ×
 * workload in a fresh Node process (worker.mjs). */
import { fmt, ms, runInChild } from './processes.mjs';

function median(runs) {
  const sorted = [...runs].sort((a, b) => a.cyclesPerSecond - b.cyclesPerSecond);
  return sorted[Math.floor((sorted.length - 1) / 2)];
}

/** Table 2: the two client libraries, each system × workload in a fresh Node process. */
export async function clientRounds(options, servers) {
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
