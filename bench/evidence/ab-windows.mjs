// Two builds of the Lease compared in the contention figure's loop, in windows taken turn about
// from the same warm processes. N processes of each build loop waiting acquire → release on one id,
// each build in its own directory. Only one build's processes run at a time: the other's are
// stopped (SIGSTOP), so neither takes the other's CPU. The windows alternate, and each build's is
// compared with the other's next to it in time, which cancels the drift that makes one round of
// this machine run anywhere from 2 800 to 5 900 cycles/s (docs/bench.md, "The twenty-fourth
// round"). Each build's processes are a warm group (bench/lib/warm-group.mjs): before each window
// the resumed processes run `settle` ms unmeasured (their timers fire and their line forms again);
// each window counts the cycles the processes report over IPC at its start and its end, and the
// CPU time of all their threads (/proc/<pid>/task/*/schedstat) over the same span. Printed: each pair's ratio (this build ÷ the other), their median and range, and
// each build's median cycles/s; then the same for the CPU time a cycle cost (µs per cycle, all
// processes together): a check that a gain in cycles is not just more CPU taken. It is no quieter
// than the throughput, with which it moves (docs/bench.md, "The twenty-fifth round").
//
//   node bench/evidence/ab-windows.mjs <other build dir> [dir=/dev/shm] [pairs=15] [window s=2] [warm-up s=10] [processes=8] [settle ms=300]
//
// `other`: a directory holding another build's dist/ and native/ (as for contention-cpu.mjs).
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { median } from '../lib/stats.mjs';
import { warmGroup } from '../lib/warm-group.mjs';

const here = fileURLToPath(new URL('.', import.meta.url));
const [
  otherArg,
  base = '/dev/shm',
  pairsArg = '15',
  windowArg = '2',
  warmupArg = '10',
  processesArg = '8',
  settleArg = '300',
] = process.argv.slice(2);
if (otherArg === undefined) {
  console.error(
    'usage: node bench/evidence/ab-windows.mjs <other build dir> [dir] [pairs] [window s] [warm-up s] [processes] [settle ms]',
  );
  process.exit(2);
}
const builds = [
  { name: 'this build', root: join(here, '..', '..') },
  { name: 'the other', root: resolve(otherArg) },
];
for (const build of builds) {
  build.group = await warmGroup(build.root, base, Number(processesArg));
  build.group.stop();
  build.rates = [];
  build.cpus = [];
}
/** Runs `build` alone for `ms` after settling: its cycles per second, and the CPU a cycle cost. */
const windowOf = (build, ms) => {
  for (const other of builds) if (other !== build) other.group.stop();
  return build.group.window(ms, Number(settleArg));
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
  await Promise.all(builds.map((build) => build.group?.close()));
}
