// CPU per cycle under contention: N processes looping waiting acquire → release on one id (the
// contention figure's loop), against the fair Node floor (bench/agents/node-floor.mjs) and the
// protocol floor (bench/evidence/protocol-floor.mjs: the Lease's own calls, none of its logic) in
// interleaved rounds, their order rotating. Reported per round: cycles/s and the CPU (user, sys;
// every thread of every process, from process.cpuUsage over the measured window) per cycle, and the
// main threads' share of it (bench/lib/thread-cpu.mjs). On a
// 2-vCPU machine with 8 processes the CPU is what bounds the throughput, so this says where the
// Lease's contention throughput goes. Imports the built package (dist/).
//
//   node bench/evidence/contention-cpu.mjs [dir=/dev/shm] [rounds=3] [seconds=3] [processes=8] [warm-up seconds=1] [other]
//
// With `other` (a directory holding another build's dist/ and native/, e.g. a copy of the checkout
// at an earlier commit after `npm ci && npm run build`), the rounds are this build's Lease and the
// other's instead, one after the other: a before/after comparison in which neither side's processes
// run beside the other's (run at once, the side that uses more CPU would take it from the other).
//
// Each process runs few cycles a second here, so V8 keeps optimizing functions for many seconds
// (TurboFan was ~20 % of all CPU samples 3.5 s in): a long warm-up (20) measures warm processes.
import { mkdtempSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { rotate } from '../figures/latency.mjs';
import { runNode } from '../lib/child.mjs';
import { mainThreadCpu } from '../lib/thread-cpu.mjs';

const here = fileURLToPath(new URL('.', import.meta.url));
const [
  base = '/dev/shm',
  roundsArg = '3',
  secondsArg = '3',
  processesArg = '8',
  warmupArg = '1',
  sixth,
  root = join(here, '..', '..'),
] = process.argv.slice(2);
const role = sixth === 'lease' ? sixth : undefined; // a contender of the build at `root` (this checkout by default)
const other = role === undefined ? sixth : undefined;
const WARMUP_MS = Number(warmupArg) * 1000;

if (role === 'lease') {
  // One contender of the build at `root`: after the warm-up, counts its cycles and its CPU over `seconds`.
  const { Lease } = await import(pathToFileURL(join(root, 'dist', 'index.js')).href);
  const lease = new Lease(base, { ttlMs: 30_000 });
  const start = performance.now();
  let cpu;
  let main;
  let cycles = 0;
  for (let now = start; now < start + WARMUP_MS + Number(secondsArg) * 1000; now = performance.now()) {
    if (cpu === undefined && now >= start + WARMUP_MS) {
      cpu = process.cpuUsage();
      main = mainThreadCpu();
    }
    const grant = await lease.acquire('contended', `p${process.pid}`, { waitMs: 30_000 });
    await lease.release(grant);
    if (cpu !== undefined) cycles++;
  }
  const used = process.cpuUsage(cpu);
  main = mainThreadCpu() - main;
  process.stdout.write(`${JSON.stringify({ cycles, user: used.user, system: used.system, main })}\n`);
} else {
  const run = (args) => runNode(args, { pipeStderr: true });
  // The floors print their cycles, not their CPU: a preload reports the CPU of the same window.
  const preload = `data:text/javascript,${encodeURIComponent(
    `import { mainThreadCpu } from ${JSON.stringify(new URL('../lib/thread-cpu.mjs', import.meta.url).href)};` +
      `let base; let main; setTimeout(() => { base = process.cpuUsage(); main = mainThreadCpu(); }, ${WARMUP_MS}).unref();` +
      `process.on('exit', () => { const u = process.cpuUsage(base); process.stderr.write('cpu ' + u.user + ' ' + u.system + ' ' + (mainThreadCpu() - main) + '\\n'); });`,
  )}`;
  /** A floor process run with the preload: its cycles and its CPU over the window. */
  const floorWithCpu = async (args) => {
    const { out, err } = await run(['--import', preload, ...args]);
    const [, user, system, main] = /cpu (\d+) (\d+) (\d+)/.exec(err) ?? [];
    return { cycles: JSON.parse(out).cycles, user: Number(user), system: Number(system), main: Number(main) };
  };
  const leaseOf = (build) => async (dir) =>
    JSON.parse(
      (await run([fileURLToPath(import.meta.url), dir, roundsArg, secondsArg, processesArg, warmupArg, 'lease', build]))
        .out,
    );
  const lease = leaseOf(join(here, '..', '..'));
  const systems =
    other !== undefined
      ? { lease, other: leaseOf(resolve(other)) }
      : {
          lease,
          'node floor': (dir) =>
            floorWithCpu([
              join(here, '..', 'agents', 'node-floor.mjs'),
              dir,
              '--contend-fair',
              secondsArg,
              '1',
              String(WARMUP_MS / 1000),
            ]),
          'protocol floor': (dir) =>
            floorWithCpu([join(here, 'protocol-floor.mjs'), '--child', dir, 'contend', warmupArg, secondsArg]),
        };
  const n = Number(processesArg);
  for (let r = 0; r < Number(roundsArg); r++) {
    for (const name of rotate(Object.keys(systems), r)) {
      const dir = mkdtempSync(join(base, 'contention-cpu-'));
      try {
        const results = await Promise.all(Array.from({ length: n }, () => systems[name](dir)));
        const cycles = results.reduce((sum, x) => sum + x.cycles, 0);
        const user = results.reduce((sum, x) => sum + x.user, 0) / cycles;
        const system = results.reduce((sum, x) => sum + x.system, 0) / cycles;
        const main = results.reduce((sum, x) => sum + x.main, 0) / cycles;
        const perSecond = Math.round(cycles / Number(secondsArg));
        console.log(
          `round ${r + 1} ${name.padEnd(14)} ${String(perSecond).padStart(6)} cycles/s, CPU per cycle ${user.toFixed(0)} µs user + ${system.toFixed(0)} µs sys (main threads ${((100 * main) / (user + system)).toFixed(0)} %)`,
        );
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }
  }
}
