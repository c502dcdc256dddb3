// Evidence for docs/bench.md ("The fourteenth round"): where a contended cycle's transition lock
// goes. N processes loop waiting acquire → release on one id (the contention figure's loop); each
// times, through the Lease's I/O seam (kIO), every hold of the transition lock from its taking to its
// letting go (wall time, and the process's CPU over it) by the operation that held it, and counts
// the tries of that lock that found it busy and the watches started. Printed per round: cycles/s,
// CPU per cycle (user, sys), busy tries and watches per cycle, and per operation the holds per
// cycle, their p50 / p90, the p50 of the time spent in LeaseIO calls within a hold, and their sum
// per cycle; then the share of its takes that found the lock busy first, and the wait from that
// first busy try to the take (p50 / p90, and per cycle). A second build (`other`: a directory
// holding dist/ and native/, e.g. a `git worktree` of an earlier commit after `npm ci`) alternates
// with this one, round by round, for before/after comparisons. Imports the built package (dist/).
//
//   node bench/evidence/contention-holds.mjs [dir=/dev/shm] [rounds=4] [seconds=3] [processes=8] [warm-up s=3] [other]
import { mkdtempSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { nodeJson } from '../lib/child.mjs';
import { quantile } from '../lib/stats.mjs';

const here = fileURLToPath(new URL('.', import.meta.url));
const args = process.argv.slice(2);
const [base = '/dev/shm', roundsArg = '4', secondsArg = '3', processesArg = '8', warmupArg = '3', other] = args;

if (args[0] === '--child') {
  // One contender of the build at args[1], in args[2]: its holds, after the warm-up, as JSON.
  const [, root, dir, warmup, seconds] = args;
  const { Lease, kIO } = await import(pathToFileURL(join(root, 'dist', 'flock', 'lease.js')).href);
  const { fileIO } = await import(pathToFileURL(join(root, 'dist', 'flock', 'io.js')).href);
  let operation = 'acquire';
  let measuring = false;
  let takenAt = 0;
  let cpuAt;
  const holds = { acquire: [], release: [] };
  const cpu = { acquire: [], release: [] };
  const inCalls = { acquire: [], release: [] };
  const waits = { acquire: [], release: [] }; // µs from a take's first busy try to the take
  let busySince = 0;
  let busy = 0;
  let watches = 0;
  let callTime = 0; // ms in LeaseIO calls since the hold began
  // Every call timed (the synchronous part of a commit: all of it on tmpfs); the two below also
  // mark a hold's start and end.
  const timed = Object.fromEntries(
    Object.entries(fileIO).map(([name, call]) => [
      name,
      (...args) => {
        const at = performance.now();
        try {
          return call(...args);
        } finally {
          callTime += performance.now() - at;
        }
      },
    ]),
  );
  const io = {
    ...timed,
    tryLockTransition(path) {
      const fd = timed.tryLockTransition(path);
      if (typeof fd !== 'number') {
        if (measuring) busy++;
        if (busySince === 0) busySince = performance.now();
      } else {
        takenAt = performance.now();
        if (measuring && busySince !== 0) waits[operation].push((takenAt - busySince) * 1000);
        busySince = 0;
        cpuAt = process.cpuUsage();
        callTime = 0;
      }
      return fd;
    },
    unlockTransition(fd) {
      timed.unlockTransition(fd);
      if (!measuring) return;
      holds[operation].push((performance.now() - takenAt) * 1000);
      inCalls[operation].push(callTime * 1000);
      const used = process.cpuUsage(cpuAt);
      cpu[operation].push(used.user + used.system);
    },
    watchUnlock(...watch) {
      if (measuring) watches++;
      return timed.watchUnlock(...watch);
    },
  };
  const lease = new Lease(dir, { ttlMs: 30_000, [kIO]: io });
  const start = performance.now();
  const warm = start + Number(warmup) * 1000;
  const end = warm + Number(seconds) * 1000;
  let cycles = 0;
  let used;
  for (let now = start; now < end; now = performance.now()) {
    if (!measuring && now >= warm) {
      measuring = true;
      used = process.cpuUsage();
    }
    operation = 'acquire';
    const grant = await lease.acquire('contended', `p${process.pid}`, { waitMs: 30_000 });
    operation = 'release';
    await lease.release(grant);
    if (measuring) cycles++;
  }
  const { user, system } = process.cpuUsage(used);
  process.stdout.write(`${JSON.stringify({ cycles, user, system, holds, cpu, inCalls, waits, busy, watches })}\n`);
} else {
  const run = (root, dir) => nodeJson([fileURLToPath(import.meta.url), '--child', root, dir, warmupArg, secondsArg]);
  const p = (xs, q) =>
    quantile(
      [...xs].sort((a, b) => a - b),
      q,
    ).toFixed(0);
  const builds = [resolve(here, '..', '..'), ...(other === undefined ? [] : [resolve(other)])];
  for (let r = 0; r < Number(roundsArg); r++) {
    for (const root of r % 2 === 0 ? builds : [...builds].reverse()) {
      const dir = mkdtempSync(join(base, 'contention-holds-'));
      try {
        const results = await Promise.all(Array.from({ length: Number(processesArg) }, () => run(root, dir)));
        const cycles = results.reduce((sum, x) => sum + x.cycles, 0);
        const per = (key) => (results.reduce((sum, x) => sum + x[key], 0) / cycles).toFixed(2);
        const line = [
          [
            `round ${r + 1} ${root}`,
            `${Math.round(cycles / Number(secondsArg))} cycles/s`,
            `CPU per cycle ${Number(per('user')).toFixed(0)} µs user + ${Number(per('system')).toFixed(0)} µs sys`,
            `busy tries ${per('busy')}, watches ${per('watches')} per cycle`,
          ].join(' · '),
        ];
        for (const operation of ['release', 'acquire']) {
          const holds = results.flatMap((x) => x.holds[operation]);
          const cpu = results.flatMap((x) => x.cpu[operation]);
          const inCalls = results.flatMap((x) => x.inCalls[operation]);
          const sum = holds.reduce((a, b) => a + b, 0) / cycles;
          const waits = results.flatMap((x) => x.waits[operation]);
          const waited = waits.reduce((a, b) => a + b, 0) / cycles;
          line.push(
            `  ${operation}: ${(holds.length / cycles).toFixed(2)} holds per cycle, p50 ${p(holds, 0.5)} / p90 ${p(holds, 0.9)} µs (CPU p50 ${p(cpu, 0.5)}; in LeaseIO calls p50 ${p(inCalls, 0.5)}), ${sum.toFixed(0)} µs per cycle`,
            `    found it busy in ${((100 * waits.length) / Math.max(1, holds.length)).toFixed(0)} % of its takes, waited p50 ${waits.length === 0 ? '-' : p(waits, 0.5)} / p90 ${waits.length === 0 ? '-' : p(waits, 0.9)} µs, ${waited.toFixed(1)} µs per cycle`,
          );
        }
        console.log(line.join('\n'));
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }
  }
}
