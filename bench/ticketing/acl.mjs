/**
 * Access control's cost (`npm run bench:ticketing -- --acl [--rounds 7]`): two `ticketing serve`s,
 * one without access rules and one with an `--acl-file` of 100 identities and 1,000 rules (10 per
 * identity, on disjoint prefixes), driven by the same C load generator at distinct 4×16 (acquire +
 * release cycles). On the ACL server the load generator is one identity (it sends `H <secret>`, its
 * secret from the environment), so every `A` and `R` is checked against its rules: once as an
 * identity without quotas, once as one with `maxHeld` and `maxWaiting` (its grants counted too).
 * Each round starts both servers afresh and runs the three sides in an order that rotates by round;
 * reports cycles/s, the ratios to no ACL (median and range of the rounds' ratios) and each
 * process's CPU.
 * Results: markdown on stdout, JSON in <out>/acl-results.json (default bench/ticketing/).
 */
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fmt, loadavg, medianOf, startTicketing, stop } from './processes.mjs';
import { buildLoadgen, loadgenMedians, runLoadgen, SERVER_WORKLOADS } from './servers.mjs';

const IDENTITIES = 100;
const RULES_PER_IDENTITY = 10;
/** The identities the load generator is, in the middle of the file: one with quotas, one without. */
const WITH_QUOTAS = 50;
const WITHOUT_QUOTAS = 51;

/** The ACL file: identity i has secret `bench-secret-<i>`, `lock` (and `observe` on half) on ten
 * prefixes, the first `t<i>/` (the load generator's keys), and quotas, except WITHOUT_QUOTAS. */
function aclFile() {
  const identities = Array.from({ length: IDENTITIES }, (_, i) => ({
    name: `team-${i}`,
    secretSha256: createHash('sha256').update(`bench-secret-${i}`).digest('hex'),
    allow: Array.from({ length: RULES_PER_IDENTITY }, (_, j) => ({
      prefix: j === 0 ? `t${i}/` : `other${i}/p${j}/`,
      verbs: j % 2 === 0 ? ['lock'] : ['lock', 'observe'],
    })),
    ...(i === WITHOUT_QUOTAS ? {} : { maxHeld: 10_000, maxWaiting: 10_000 }),
  }));
  return JSON.stringify({ identities });
}

const serverUs = (run) => run.serverUserUsPerCycle + run.serverSysUsPerCycle;

/** A side's medians over rounds, and its per-round ratios to `base` (no ACL). */
function summarise(list, base) {
  const ratios = list.map((run, i) => run.cyclesPerSecond / base[i].cyclesPerSecond);
  return {
    ...loadgenMedians(list),
    vsNoAcl: {
      cyclesPerSecond: medianOf(ratios),
      min: Math.min(...ratios),
      max: Math.max(...ratios),
      serverCpuPerCycle: medianOf(list.map((run, i) => serverUs(run) / serverUs(base[i]))),
    },
  };
}

export async function aclMain(options) {
  const loadgen = buildLoadgen();
  const workload = SERVER_WORKLOADS.find((w) => w.id === 'distinct 4×16');
  const dir = mkdtempSync(join(tmpdir(), 'ticketing-acl-bench-'));
  const file = join(dir, 'acl.json');
  writeFileSync(file, aclFile());
  const side = (id, identity, secret) => ({ id, identity, secret, proto: 'ticketing', backoffUs: 0 });
  const sides = [
    side('no ACL', WITH_QUOTAS, undefined),
    side('ACL', WITHOUT_QUOTAS, `bench-secret-${WITHOUT_QUOTAS}`),
    side('ACL + quotas', WITH_QUOTAS, `bench-secret-${WITH_QUOTAS}`),
  ];
  const loadStart = loadavg();
  const runs = Object.fromEntries(sides.map(({ id }) => [id, []]));
  let servers = [];
  try {
    for (let round = 1; round <= options.rounds; round++) {
      // Fresh servers every round: one process's luck (its heap, its code's layout) is not every
      // round's. The ACL server serves both ACL sides.
      const plain = await startTicketing();
      const guarded = await startTicketing('--acl-file', file);
      servers = [plain, guarded];
      for (const s of sides.map((_, i) => sides[(i + round - 1) % sides.length])) {
        // Keys under the identity's first prefix (it may lock them).
        const prefix = `t${s.identity}/r${round}${sides.indexOf(s)}`;
        const run = await runLoadgen(s, workload, s.secret === undefined ? plain : guarded, options, prefix);
        runs[s.id].push(run);
        console.error(
          `round ${round} ${s.id.padEnd(12)} ${fmt(run.cyclesPerSecond).padStart(9)} cycles/s  p99 ${Math.round(run.p99Us)} µs  ` +
            `server ${serverUs(run).toFixed(2)} µs/cycle (${(100 * run.serverCpuShare).toFixed(0)} % CPU)  ` +
            `loadgen ${(run.clientUserUsPerCycle + run.clientSysUsPerCycle).toFixed(2)} µs/cycle (${(100 * run.clientCpuShare).toFixed(0)} % CPU)`,
        );
      }
      for (const server of servers) await stop(server.child);
      servers = [];
    }
  } finally {
    for (const server of servers) await stop(server.child);
    rmSync(dir, { recursive: true, force: true });
  }
  const loadEnd = loadavg();
  const summary = Object.fromEntries(sides.map(({ id }) => [id, summarise(runs[id], runs['no ACL'])]));
  const ratio = (r) => `${r.cyclesPerSecond.toFixed(3)}× (${r.min.toFixed(3)}–${r.max.toFixed(3)})`;
  const rows = [
    '| side | cycles/s (median) | cycles/s range | ÷ no ACL cycles/s (rounds’ range) | p99 µs | server CPU µs/cycle (user + sys) | ÷ no ACL server CPU | server CPU share | load generator CPU µs/cycle | load generator CPU share |',
    '|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
    ...sides.map(({ id }) => {
      const c = summary[id];
      const vs = id === 'no ACL' ? undefined : c.vsNoAcl;
      return (
        `| ${id} | ${fmt(c.cyclesPerSecond)} | ${fmt(c.min)}–${fmt(c.max)} | ${vs ? ratio(vs) : ''} | ${Math.round(c.p99Us)} | ` +
        `${serverUs(c).toFixed(2)} (${c.serverUserUsPerCycle.toFixed(2)} + ${c.serverSysUsPerCycle.toFixed(2)}) | ` +
        `${vs ? `${vs.serverCpuPerCycle.toFixed(3)}×` : ''} | ${(100 * c.serverCpuShare).toFixed(0)} % | ` +
        `${c.clientUsPerCycle.toFixed(2)} | ${(100 * c.clientCpuShare).toFixed(0)} % |`
      );
    }),
  ];
  const failures = sides.reduce((n, { id }) => n + summary[id].failures, 0);
  const run = `${options.durationMs / 1000} s per run after ${options.warmupMs / 1000} s warm-up, ${options.rounds} interleaved round(s)`;
  console.log(
    [
      `### Access control's cost: ${IDENTITIES} identities and ${IDENTITIES * RULES_PER_IDENTITY} rules against none, distinct 4×16 (one C load generator; ${run})`,
      '',
      `${cpus().length} CPUs, Node ${process.version}; load average ${loadStart[0]} at start, ${loadEnd[0]} at end. Medians over rounds.`,
      '',
      ...rows,
      '',
      `Check: ${failures === 0 ? 'every acquire was granted and every release R in every run' : `${failures} refused acquires or failed releases`}.`,
    ].join('\n'),
  );
  mkdirSync(options.out, { recursive: true });
  writeFileSync(
    join(options.out, 'acl-results.json'),
    `${JSON.stringify({ date: new Date().toISOString(), machine: { cpus: cpus().length, node: process.version, loadgen }, load: { start: loadStart, end: loadEnd }, options, setup: { identities: IDENTITIES, rules: IDENTITIES * RULES_PER_IDENTITY }, summary, runs }, null, 2)}\n`,
  );
  if (failures > 0) process.exitCode = 1;
}
