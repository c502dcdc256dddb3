// T6's ratio (the Lease's contended cycles ÷ the fair C floor's) from alternating windows, so that
// both sides of each pair run in the same stretch of this machine's speed, which changes for tens
// of seconds at a time (docs/bench.md, "The twenty-fifth round"). The Lease's N processes are a
// warm group (bench/lib/warm-group.mjs): stopped outside their windows, each window counted after
// `settle` ms. The fair C floor needs no
// warm-up: each of its windows is N fresh `floor --contend-fair` processes on their own directory,
// each counting the cycles it began in the window after the same settle. The order within a pair
// alternates. Printed: each pair's rates and ratio, their median and range. The benchmark's T6
// figure (bench/figures/contention.mjs) instead runs each side in rounds of fresh processes with a
// 10 s warm-up, one round after another.
//
//   node bench/evidence/t6-windows.mjs [dir=/dev/shm] [pairs=15] [window s=2] [warm-up s=10] [processes=8] [settle ms=300]
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildFloor, floorContender } from '../lib/floor.mjs';
import { median } from '../lib/stats.mjs';
import { warmGroup } from '../lib/warm-group.mjs';

const here = fileURLToPath(new URL('.', import.meta.url));
const [base = '/dev/shm', pairsArg = '15', windowArg = '2', warmupArg = '10', processesArg = '8', settleArg = '300'] =
  process.argv.slice(2);
const processes = Number(processesArg);
const windowS = Number(windowArg);
const settleMs = Number(settleArg);
buildFloor();

const lease = await warmGroup(join(here, '..', '..'), base, processes);
const floorDir = mkdtempSync(join(base, 't6-windows-floor-'));

/** The Lease's cycles per second over one window of its warm processes, which are then stopped. */
async function leaseWindow(ms) {
  const { rate } = await lease.window(ms, settleMs);
  lease.stop();
  return rate;
}

/** The fair C floor's cycles per second over one window of fresh processes. */
async function floorWindow() {
  const settings = { seconds: windowS, warmupSeconds: settleMs / 1000, durable: true, fair: true };
  const runs = await Promise.all(Array.from({ length: processes }, () => floorContender(floorDir, settings)));
  return runs.reduce((sum, run) => sum + run.cycles, 0) / windowS;
}

try {
  await leaseWindow(Number(warmupArg) * 1000); // warm-up, not counted
  const ratios = [];
  const leaseRates = [];
  const floorRates = [];
  for (let p = 0; p < Number(pairsArg); p++) {
    if (p % 2 === 0) {
      leaseRates.push(await leaseWindow(windowS * 1000));
      floorRates.push(await floorWindow());
    } else {
      floorRates.push(await floorWindow());
      leaseRates.push(await leaseWindow(windowS * 1000));
    }
    ratios.push(leaseRates.at(-1) / floorRates.at(-1));
    console.log(
      `pair ${p + 1}: Lease ${Math.round(leaseRates.at(-1))}/s, fair C floor ${Math.round(floorRates.at(-1))}/s, ratio ${(100 * ratios.at(-1)).toFixed(1)} %`,
    );
  }
  const sorted = [...ratios].sort((a, b) => a - b);
  console.log(
    `\nthe Lease ÷ the fair C floor: median ${(100 * median(ratios)).toFixed(1)} % (${(100 * sorted[0]).toFixed(1)}–${(100 * sorted.at(-1)).toFixed(1)} %) over ${ratios.length} pairs; medians ${Math.round(median(leaseRates))} / ${Math.round(median(floorRates))} cycles/s`,
  );
} finally {
  await lease.close();
  rmSync(floorDir, { recursive: true, force: true });
}
