/**
 * Access control's cost (`npm run bench:ticketing -- --acl [--rounds 7]`): two `ticketing serve`s,
 * one without access rules and one with an `--acl-file` of 100 identities and 1,000 rules (10 per
 * identity, on disjoint prefixes; each with quotas), driven by the same C load generator at
 * distinct 4×16 (acquire + release cycles). On the ACL server the load generator is one identity
 * (it sends `H <secret>`, its secret from the environment), so every `A` and `R` is checked against
 * its rules and quotas, and counted. Each round runs both, alternating which goes first; reports
 * cycles/s, the ratio (median and range of the rounds' ratios) and each process's CPU.
 * Results: markdown on stdout, JSON in <out>/acl-results.json (default bench/ticketing/).
 */
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fmt, loadavg, medianOf, startTicketing, stop } from './processes.mjs';
import { buildLoadgen, runLoadgen, SERVER_WORKLOADS } from './servers.mjs';

const IDENTITIES = 100;
const RULES_PER_IDENTITY = 10;
/** The identity the load generator is: one in the middle of the file. */
const LOADED = 50;
const SECRET = 'bench-secret-50';

/** The ACL file: identity i has secret `bench-secret-<i>` and `lock` (and `observe` on half) on
 * ten prefixes `t<i>/…`; the loaded identity's first rule covers the load generator's keys. */
function aclFile() {
  const identities = Array.from({ length: IDENTITIES }, (_, i) => ({
    name: `team-${i}`,
    secretSha256: createHash('sha256').update(`bench-secret-${i}`).digest('hex'),
    allow: Array.from({ length: RULES_PER_IDENTITY }, (_, j) => ({
      prefix: j === 0 ? `t${i}/` : `other${i}/p${j}/`,
      verbs: j % 2 === 0 ? ['lock'] : ['lock', 'observe'],
    })),
    maxHeld: 10_000,
    maxWaiting: 10_000,
  }));
  return JSON.stringify({ identities });
}

export async function aclMain(options) {
  const loadgen = buildLoadgen();
  const workload = SERVER_WORKLOADS.find((w) => w.id === 'distinct 4×16');
  const dir = mkdtempSync(join(tmpdir(), 'ticketing-acl-bench-'));
  const file = join(dir, 'acl.json');
  writeFileSync(file, aclFile());
  const sides = [
    { id: 'no ACL', proto: 'ticketing', backoffUs: 0, flags: [] },
    { id: 'ACL', proto: 'ticketing', backoffUs: 0, flags: ['--acl-file', file], secret: SECRET },
  ];
  const loadStart = loadavg();
  const runs = { 'no ACL': [], ACL: [] };
  try {
    for (const side of sides) side.server = await startTicketing(...side.flags);
    for (let round = 1; round <= options.rounds; round++) {
      for (const side of round % 2 === 0 ? [...sides].reverse() : sides) {
        // Keys under the loaded identity's first prefix (it may lock them); the other side, the same.
        const run = await runLoadgen(
          side,
          workload,
          side.server,
          options,
          `t${LOADED}/r${round}${side.secret ? 'a' : 'n'}`,
        );
        runs[side.id].push(run);
        console.error(
          `round ${round} ${side.id.padEnd(6)} ${fmt(run.cyclesPerSecond).padStart(9)} cycles/s  p99 ${Math.round(run.p99Us)} µs  ` +
            `server ${(run.serverUserUsPerCycle + run.serverSysUsPerCycle).toFixed(2)} µs/cycle (${(100 * run.serverCpuShare).toFixed(0)} % CPU)  ` +
            `loadgen ${(run.clientUserUsPerCycle + run.clientSysUsPerCycle).toFixed(2)} µs/cycle (${(100 * run.clientCpuShare).toFixed(0)} % CPU)`,
        );
      }
    }
  } finally {
    for (const side of sides) if (side.server) await stop(side.server.child);
    rmSync(dir, { recursive: true, force: true });
  }
  const loadEnd = loadavg();
  const serverUs = (run) => run.serverUserUsPerCycle + run.serverSysUsPerCycle;
  const ratios = runs.ACL.map((run, i) => run.cyclesPerSecond / runs['no ACL'][i].cyclesPerSecond);
  const cpuRatios = runs.ACL.map((run, i) => serverUs(run) / serverUs(runs['no ACL'][i]));
  const summary = {};
  const rows = [
    '| server | cycles/s (median) | cycles/s range | p99 µs | server CPU µs/cycle (user + sys) | server CPU share | load generator CPU µs/cycle | load generator CPU share |',
    '|---|--:|--:|--:|--:|--:|--:|--:|',
  ];
  for (const { id } of sides) {
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
        `${(cell.serverUserUsPerCycle + cell.serverSysUsPerCycle).toFixed(2)} (${cell.serverUserUsPerCycle.toFixed(2)} + ${cell.serverSysUsPerCycle.toFixed(2)}) | ` +
        `${(100 * cell.serverCpuShare).toFixed(0)} % | ${cell.clientUsPerCycle.toFixed(2)} | ${(100 * cell.clientCpuShare).toFixed(0)} % |`,
    );
  }
  summary.ratio = {
    cyclesPerSecond: medianOf(ratios),
    min: Math.min(...ratios),
    max: Math.max(...ratios),
    serverCpuPerCycle: medianOf(cpuRatios),
  };
  const failures = summary['no ACL'].failures + summary.ACL.failures;
  const run = `${options.durationMs / 1000} s per run after ${options.warmupMs / 1000} s warm-up, ${options.rounds} interleaved round(s)`;
  console.log(
    [
      `### Access control's cost: ${IDENTITIES} identities and ${IDENTITIES * RULES_PER_IDENTITY} rules against none, distinct 4×16 (one C load generator; ${run})`,
      '',
      `${cpus().length} CPUs, Node ${process.version}; load average ${loadStart[0]} at start, ${loadEnd[0]} at end. Medians over rounds.`,
      '',
      ...rows,
      '',
      `ACL ÷ no ACL cycles/s: ${summary.ratio.cyclesPerSecond.toFixed(3)}× (rounds ${summary.ratio.min.toFixed(3)}–${summary.ratio.max.toFixed(3)}); ` +
        `server CPU per cycle ${summary.ratio.serverCpuPerCycle.toFixed(3)}×.`,
      '',
      `Check: ${failures === 0 ? 'every acquire was granted and every release R in every run' : `${failures} refused acquires or failed releases`}.`,
    ].join('\n'),
  );
  mkdirSync(options.out, { recursive: true });
  writeFileSync(
    join(options.out, 'acl-results.json'),
    `${JSON.stringify({ date: new Date().toISOString(), machine: { cpus: cpus().length, node: process.version, loadgen }, load: { start: loadStart, end: loadEnd }, options, setup: { identities: IDENTITIES, rules: IDENTITIES * RULES_PER_IDENTITY }, summary, runs: { 'no ACL': runs['no ACL'], ACL: runs.ACL } }, null, 2)}\n`,
  );
  if (failures > 0) process.exitCode = 1;
}
