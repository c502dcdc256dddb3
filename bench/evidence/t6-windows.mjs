// T6's ratio (the Lease's contended cycles ÷ the fair C floor's) from alternating windows, so that
// both sides of each pair run in the same stretch of this machine's speed, which changes for tens
// of seconds at a time (docs/bench.md, "The twenty-fifth round"). The Lease's N processes loop
// waiting acquire → release on one id and stay warm: stopped (SIGSTOP) outside their windows, each
// window counted over IPC after `settle` ms (as ab-windows.mjs does). The fair C floor needs no
// warm-up: each of its windows is N fresh `floor --contend-fair` processes on their own directory,
// each counting the cycles it began in the window after the same settle. The order within a pair
// alternates. Printed: each pair's rates and ratio, their median and range. The benchmark's T6
// figure (bench/figures/contention.mjs) instead runs each side in rounds of fresh processes with a
// 10 s warm-up, one round after another.
//
//   node bench/evidence/t6-windows.mjs [dir=/dev/shm] [pairs=15] [window s=2] [warm-up s=10] [processes=8] [settle ms=300]
import { execFile, fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildFloor } from '../lib/floor.mjs';
import { median } from '../lib/stats.mjs';

const here = fileURLToPath(new URL('.', import.meta.url));
const [base = '/dev/shm', pairsArg = '15', windowArg = '2', warmupArg = '10', processesArg = '8', settleArg = '300'] =
  process.argv.slice(2);
const processes = Number(processesArg);
const windowS = Number(windowArg);
const settleS = Number(settleArg) / 1000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const once = (child) => new Promise((r) => child.once('message', r));
const { binary } = buildFloor();

// The Lease's contenders: ab-windows.mjs's child loop, on this checkout's build.
const leaseDir = mkdtempSync(join(base, 't6-windows-'));
const floorDir = mkdtempSync(join(base, 't6-windows-floor-'));
const children = Array.from({ length: processes }, () =>
  fork(join(here, 'ab-windows.mjs'), ['--child', join(here, '..', '..'), leaseDir], { stdio: 'inherit' }),
);
await Promise.all(children.map(once));
const signal = (sig) => children.forEach((child) => child.kill(sig));
const count = async () =>
  (await Promise.all(children.map((c) => (c.send('count'), once(c))))).reduce((a, b) => a + b, 0);

/** The Lease's cycles per second over one window of its warm processes. */
async function leaseWindow(ms) {
  signal('SIGCONT');
  await sleep(settleS * 1000);
  const start = performance.now();
  const before = await count();
  await sleep(ms);
  const after = await count();
  const rate = ((after - before) * 1000) / (performance.now() - start);
  signal('SIGSTOP');
  return rate;
}

/** The fair C floor's cycles per second over one window of fresh processes. */
async function floorWindow() {
  const runs = Array.from(
    { length: processes },
    () =>
      new Promise((resolve, reject) =>
        execFile(binary, [floorDir, '--contend-fair', String(windowS), '1', String(settleS)], (error, stdout) =>
          error ? reject(error) : resolve(JSON.parse(stdout).cycles),
        ),
      ),
  );
  return (await Promise.all(runs)).reduce((a, b) => a + b, 0) / windowS;
}

try {
  await leaseWindow(Number(warmupArg) * 1000); // warm-up, not counted
  const ratios = [];
  const lease = [];
  const floor = [];
  for (let p = 0; p < Number(pairsArg); p++) {
    if (p % 2 === 0) {
      lease.push(await leaseWindow(windowS * 1000));
      floor.push(await floorWindow());
    } else {
      floor.push(await floorWindow());
      lease.push(await leaseWindow(windowS * 1000));
    }
    ratios.push(lease.at(-1) / floor.at(-1));
    console.log(
      `pair ${p + 1}: Lease ${Math.round(lease.at(-1))}/s, fair C floor ${Math.round(floor.at(-1))}/s, ratio ${(100 * ratios.at(-1)).toFixed(1)} %`,
    );
  }
  const sorted = [...ratios].sort((a, b) => a - b);
  console.log(
    `\nthe Lease ÷ the fair C floor: median ${(100 * median(ratios)).toFixed(1)} % (${(100 * sorted[0]).toFixed(1)}–${(100 * sorted.at(-1)).toFixed(1)} %) over ${ratios.length} pairs; medians ${Math.round(median(lease))} / ${Math.round(median(floor))} cycles/s`,
  );
} finally {
  signal('SIGCONT');
  children.forEach((child) => child.disconnect());
  await sleep(200);
  signal('SIGKILL');
  rmSync(leaseDir, { recursive: true, force: true });
  rmSync(floorDir, { recursive: true, force: true });
}
