// Two builds of the Lease compared in the contention figure's loop, in windows taken turn about
// from the same warm processes. N processes of each build loop waiting acquire → release on one id,
// each build in its own directory. Only one build's processes run at a time: the other's are
// stopped (SIGSTOP), so neither takes the other's CPU. The windows alternate, and each build's is
// compared with the other's next to it in time, which cancels the drift that makes one round of
// this machine run anywhere from 2 800 to 5 900 cycles/s (docs/bench.md, "The twenty-fourth
// round"). Before each window the resumed processes run `settle` ms unmeasured (their timers
// fire and their line forms again); each window counts the cycles the processes report over IPC at
// its start and its end, and the CPU time of all their threads (/proc/<pid>/task/*/schedstat) over
// the same span. Printed: each pair's ratio (this build ÷ the other), their median and range, and
// each build's median cycles/s; then the same for the CPU time a cycle cost (µs per cycle, all
// processes together): a check that a gain in cycles is not just more CPU taken. It is no quieter
// than the throughput, with which it moves (docs/bench.md, "The twenty-fifth round").
//
//   node bench/evidence/ab-windows.mjs <other build dir> [dir=/dev/shm] [pairs=15] [window s=2] [warm-up s=10] [processes=8] [settle ms=300]
//
// `other`: a directory holding another build's dist/ and native/ (as for contention-cpu.mjs).
import { fork } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { median } from '../lib/stats.mjs';

const here = fileURLToPath(new URL('.', import.meta.url));
const args = process.argv.slice(2);

if (args[0] === '--child') {
  // One contender: loops until killed, and answers each 'count' with its cycles so far.
  const [, root, dir] = args;
  const { Lease } = await import(pathToFileURL(join(root, 'dist', 'index.js')).href);
  const lease = new Lease(dir, { ttlMs: 30_000 });
  let cycles = 0;
  process.on('message', () => process.send(cycles));
  process.on('disconnect', () => process.exit(0));
  process.send('ready');
  for (;;) {
    const grant = await lease.acquire('contended', `p${process.pid}`, { waitMs: 60_000 });
    await lease.release(grant);
    cycles++;
  }
} else {
  const [
    otherArg,
    base = '/dev/shm',
    pairsArg = '15',
    windowArg = '2',
    warmupArg = '10',
    processesArg = '8',
    settleArg = '300',
  ] = args;
  if (otherArg === undefined) {
    console.error(
      'usage: node bench/evidence/ab-windows.mjs <other build dir> [dir] [pairs] [window s] [warm-up s] [processes] [settle ms]',
    );
    process.exit(2);
  }
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const builds = [
    { name: 'this build', root: join(here, '..', '..') },
    { name: 'the other', root: resolve(otherArg) },
  ];
  const once = (child) => new Promise((r) => child.once('message', r));
  for (const build of builds) {
    build.dir = mkdtempSync(join(base, 'ab-windows-'));
    build.children = Array.from({ length: Number(processesArg) }, () =>
      fork(fileURLToPath(import.meta.url), ['--child', build.root, build.dir], { stdio: 'inherit' }),
    );
    await Promise.all(build.children.map(once));
    build.rates = [];
    build.cpus = [];
  }
  const signal = (build, sig) => build.children.forEach((child) => child.kill(sig));
  /** The CPU time (ns) all the threads of `build`'s processes have run. */
  const cpuNs = (build) => {
    let ns = 0;
    for (const { pid } of build.children)
      for (const tid of readdirSync(`/proc/${pid}/task`))
        ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
    return ns;
  };
  const count = async (build) =>
    (await Promise.all(build.children.map((c) => (c.send('count'), once(c))))).reduce((a, b) => a + b, 0);
  /** Runs `build` alone for `ms` after settling: its cycles per second over that time, and the CPU
   * time a cycle cost (µs). */
  const windowOf = async (build, ms) => {
    for (const other of builds) if (other !== build) signal(other, 'SIGSTOP');
    signal(build, 'SIGCONT');
    await sleep(Number(settleArg));
    const start = performance.now();
    const [before, cpuBefore] = [await count(build), cpuNs(build)];
    await sleep(ms);
    const [after, cpuAfter] = [await count(build), cpuNs(build)];
    return {
      rate: ((after - before) * 1000) / (performance.now() - start),
      cpuUs: (cpuAfter - cpuBefore) / 1000 / (after - before),
    };
  };
  try {
    // Warm-up: each build alone, turn about, in windows of up to 5 s.
    for (let left = Number(warmupArg) * 1000; left > 0; left -= 5000)
      for (const build of builds) await windowOf(build, Math.min(left, 5000));
    const ratios = [];
    const cpuRatios = [];
    for (let p = 0; p < Number(pairsArg); p++) {
      // The order alternates, so neither build always runs first.
      const order = p % 2 === 0 ? builds : [...builds].reverse();
      for (const build of order) {
        const { rate, cpuUs } = await windowOf(build, Number(windowArg) * 1000);
        build.rates.push(rate);
        build.cpus.push(cpuUs);
      }
      ratios.push(builds[0].rates.at(-1) / builds[1].rates.at(-1));
      cpuRatios.push(builds[0].cpus.at(-1) / builds[1].cpus.at(-1));
      const each = builds.map((b) => `${b.name} ${Math.round(b.rates.at(-1))}/s ${Math.round(b.cpus.at(-1))} µs`);
      console.log(
        `pair ${p + 1}: ${each.join(', ')}; ratio ${ratios.at(-1).toFixed(3)}, CPU ${cpuRatios.at(-1).toFixed(3)}`,
      );
    }
    const summary = (what, values, better) => {
      const sorted = [...values].sort((a, b) => a - b);
      const ahead = values.filter(better).length;
      console.log(
        `${what}: median ${median(values).toFixed(3)}× (${sorted[0].toFixed(2)}–${sorted.at(-1).toFixed(2)}×), ahead in ${ahead} of ${values.length}`,
      );
    };
    console.log('');
    summary('this build ÷ the other, cycles/s', ratios, (r) => r > 1);
    summary('this build ÷ the other, CPU µs per cycle', cpuRatios, (r) => r < 1);
    for (const build of builds)
      console.log(
        `${build.name}: median ${Math.round(median(build.rates))} cycles/s, ${Math.round(median(build.cpus))} µs of CPU per cycle`,
      );
  } finally {
    for (const build of builds) {
      signal(build, 'SIGCONT');
      build.children.forEach((child) => child.disconnect());
    }
    await sleep(200);
    for (const build of builds) {
      signal(build, 'SIGKILL');
      rmSync(build.dir, { recursive: true, force: true });
    }
  }
}
