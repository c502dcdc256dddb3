// Contention: N processes, one id, each looping a waiting acquire → release; after a warm-up, for
// a fixed window: throughput (cycles completed per second, all processes together) and each
// acquire's wait (mean, p99, max, and max/mean: how unfair the worst wait is).
// The C floor runs the same loop with blocking kernel waits (`c-floor dir --contend`), 8 at once;
// it is unfair (the releaser usually wins the next round at once, no hand-off). The fair C floor
// (`--contend-fair`) serves waiters first come first served, each hand-off waking the next process,
// as the lease's queue does: the floor for a FAIR lease. The Node floor
// (bench/agents/node-floor-handoff.mjs) runs that fair protocol in Node through the lease's own
// addon calls: what any Node process pays for it. The protocol floor (bench/agents/protocol-floor.mjs)
// makes every call the Lease's contended cycle makes, without its logic: T6's reference. All five
// alternate round by round, their order rotating, so machine drift hits each alike.
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { floorContender } from '../lib/c-floor.mjs';
import { median, round, sharedNow, summarize } from '../lib/stats.mjs';
import { rotate } from './latency.mjs';

const CONTENDER = join(dirname(fileURLToPath(import.meta.url)), '..', 'agents', 'contender.mjs');

function startContender(key, dir, pollMs, execArgv) {
  const child = spawn(process.execPath, [...execArgv, CONTENDER, key, dir, String(pollMs)], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const next = async () => {
    const { value, done } = await lines.next();
    if (done) throw new Error(`contender ${key} exited early`);
    return JSON.parse(value);
  };
  return { child, next };
}

/** One window of `processes` node contenders (`execArgv`: their Node flags): { cycles, waitsMs, perProcess }. */
async function nodeRound(key, dir, { processes, warmupMs, durationMs, pollMs, execArgv = [] }) {
  const contenders = Array.from({ length: processes }, () => startContender(key, dir, pollMs, execArgv));
  await Promise.all(contenders.map((c) => c.next())); // all loaded and ready
  const startAt = sharedNow() + 50;
  for (const c of contenders) c.child.stdin.end(`${JSON.stringify({ startAt, warmupMs, durationMs })}\n`);
  const results = await Promise.all(contenders.map((c) => c.next()));
  return {
    cycles: results.reduce((n, r) => n + r.cycles, 0),
    waitsMs: results.flatMap((r) => r.waitsMs),
    perProcess: results.map((r) => r.cycles),
  };
}

/** The same window of the C floor's contenders, or (runtime 'node', 'protocol') the Node or protocol floor's. */
async function floorRound(dir, { processes, warmupMs, durationMs, fair, runtime }) {
  const settings = { seconds: durationMs / 1000, warmupSeconds: warmupMs / 1000, durable: true, fair, runtime };
  const results = await Promise.all(Array.from({ length: processes }, () => floorContender(dir, settings)));
  return {
    cycles: results.reduce((n, r) => n + r.cycles, 0),
    waitsMs: results.flatMap((r) => r.waitsMs),
    perProcess: results.map((r) => r.cycles),
  };
}

function describe(rounds, durationMs) {
  const each = rounds.map((r) => {
    const waits = summarize(r.waitsMs);
    return {
      throughput: round(r.cycles / (durationMs / 1000)),
      cycles: r.cycles,
      perProcess: r.perProcess,
      waitMeanMs: waits.mean,
      waitP99Ms: waits.p99,
      waitMaxMs: waits.max,
      maxOverMean: round(waits.max / waits.mean),
    };
  });
  const med = (field) => round(median(each.map((r) => r[field])));
  return {
    throughput: med('throughput'),
    waitMeanMs: med('waitMeanMs'),
    waitP99Ms: med('waitP99Ms'),
    waitMaxMs: med('waitMaxMs'),
    maxOverMean: med('maxOverMean'),
    waits: summarize(rounds.flatMap((r) => r.waitsMs)),
    rounds: each,
  };
}

/** The floors of the figure, each with how its contenders run (bench/lib/c-floor.mjs, floorContender). */
const FLOORS = {
  'floor-durable': { fair: false, runtime: 'c' },
  'floor-fair': { fair: true, runtime: 'c' },
  'node-floor-fair': { fair: true, runtime: 'node' },
  'protocol-floor': { fair: true, runtime: 'protocol' },
};

/**
 * { lease, floors…, [peers…] } for one directory. `peers` (proper-lockfile, lockfile) run one round
 * each after the alternating Lease/floor rounds, polling every `peerPollMs`.
 */
export async function contentionFigure({ dir, rounds, processes, warmupMs, durationMs, peers = [], peerPollMs, log }) {
  const settings = { processes, warmupMs, durationMs };
  const kinds = ['lease', ...Object.keys(FLOORS)];
  const runs = Object.fromEntries(kinds.map((k) => [k, []]));
  for (let r = 0; r < rounds; r++) {
    for (const which of rotate(kinds, r)) {
      const d = join(dir, `contend-${which}-${r}`);
      mkdirSync(d, { recursive: true });
      if (which === 'lease') runs.lease.push(await nodeRound('lease', d, { ...settings, pollMs: 0 }));
      else runs[which].push(await floorRound(d, { ...settings, ...FLOORS[which] }));
    }
    log?.(`  contention round ${r + 1}/${rounds}`);
  }
  const result = Object.fromEntries(kinds.map((k) => [k, describe(runs[k], durationMs)]));
  for (const key of peers) {
    const d = join(dir, `contend-${key}`);
    mkdirSync(d, { recursive: true });
    result[key] = {
      ...describe([await nodeRound(key, d, { ...settings, pollMs: peerPollMs })], durationMs),
      pollMs: peerPollMs,
    };
    log?.(`  contention ${key}`);
  }
  return result;
}
