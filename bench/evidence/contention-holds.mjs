// Evidence for docs/bench.md ("The fourteenth round"): where a contended cycle's transition lock
// goes. N processes loop waiting acquire → release on one id (the contention figure's loop); each
// times, through the Lease's I/O seam (kIO), every hold of the transition lock from its taking to its
// letting go (wall time, and the process's CPU over it) by the operation that held it, and counts
// the tries of that lock that found it busy and the watches started. Printed per round: cycles/s,
// CPU per cycle (user, sys), busy tries and watches per cycle, and per operation the holds per
// cycle, their p50 / p90 and their sum per cycle. A second build (`other`: a directory holding
// dist/ and native/, e.g. a `git worktree` of an earlier commit after `npm ci`) alternates with
// this one, round by round, for before/after comparisons. Imports the built package (dist/).
//
//   node bench/evidence/contention-holds.mjs [dir=/dev/shm] [rounds=4] [seconds=3] [processes=8] [warm-up s=3] [other]
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

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
  let busy = 0;
  let watches = 0;
  const io = {
    ...fileIO,
    tryLockTransition(path) {
      const fd = fileIO.tryLockTransition(path);
      if (measuring && typeof fd !== 'number') busy++;
      if (typeof fd === 'number') {
        takenAt = performance.now();
        cpuAt = process.cpuUsage();
      }
      return fd;
    },
    unlockTransition(fd) {
      fileIO.unlockTransition(fd);
      if (!measuring) return;
      holds[operation].push((performance.now() - takenAt) * 1000);
      const used = process.cpuUsage(cpuAt);
      cpu[operation].push(used.user + used.system);
    },
    watchUnlock(...watch) {
      if (measuring) watches++;
      return fileIO.watchUnlock(...watch);
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
  process.stdout.write(`${JSON.stringify({ cycles, user, system, holds, cpu, busy, watches })}\n`);
} else {
  const run = (root, dir) =>
    new Promise((done, fail) => {
      const child = spawn(
        process.execPath,
        [fileURLToPath(import.meta.url), '--child', root, dir, warmupArg, secondsArg],
        { stdio: ['ignore', 'pipe', 'inherit'] },
      );
      let out = '';
      child.stdout.on('data', (chunk) => (out += chunk));
      child.on('exit', (code) => (code === 0 ? done(JSON.parse(out)) : fail(new Error(`a contender exited ${code}`))));
    });
  const quantile = (xs, q) => [...xs].sort((a, b) => a - b)[Math.floor(q * (xs.length - 1))] ?? NaN;
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
          const sum = holds.reduce((a, b) => a + b, 0) / cycles;
          line.push(
            `  ${operation}: ${(holds.length / cycles).toFixed(2)} holds per cycle, p50 ${quantile(holds, 0.5).toFixed(0)} / p90 ${quantile(holds, 0.9).toFixed(0)} µs (CPU p50 ${quantile(cpu, 0.5).toFixed(0)}), ${sum.toFixed(0)} µs per cycle`,
          );
        }
        console.log(line.join('\n'));
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }
  }
}
