// Evidence for docs/bench.md (T3): a stream of Lease operations with the loop-turn probe of
// bench/figures/eld.mjs, excluding the turns that overlapped a GC (PerformanceObserver 'gc'
// entries): is the p99 of the operation turns garbage collection?
//   node bench/evidence/turngc.mjs [dir root, default /tmp]
import { rmSync } from 'node:fs';
import { PerformanceObserver } from 'node:perf_hooks';
import { Lease } from '../../dist/index.js';

const root = process.argv[2] ?? '/tmp';
const dir = `${root}/flocklease-turngc`;
rmSync(dir, { recursive: true, force: true });
const lease = new Lease(dir);
const gcs = [];
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) gcs.push([e.startTime, e.startTime + e.duration]);
}).observe({ entryTypes: ['gc'] });
const turn = () => new Promise((resolve) => setImmediate(resolve));
const activity = { count: 0 };
const length = new Float64Array(1 << 20);
const start = new Float64Array(1 << 20);
let n = 0;
let on = true;
let last = performance.now();
let seen = 0;
const tick = () => {
  const now = performance.now();
  if (activity.count !== seen) {
    length[n] = (now - last) * 1000;
    start[n++] = last;
  }
  seen = activity.count;
  last = now;
  if (on) setImmediate(tick);
};
setImmediate(tick);
const end = performance.now() + 3000;
for (let i = 0; performance.now() < end; i++) {
  await turn();
  activity.count++;
  const grant = await lease.acquire(`id-${i % 4}`, 'me');
  activity.count++;
  await turn();
  activity.count++;
  await lease.release(grant);
  activity.count++;
}
on = false;
await turn();
await new Promise((resolve) => setTimeout(resolve, 50)); // let the gc entries arrive
const all = [];
const withoutGc = [];
for (let i = 0; i < n; i++) {
  const a = start[i];
  const b = a + length[i] / 1000;
  all.push(length[i]);
  if (!gcs.some(([s, e]) => s < b && e > a)) withoutGc.push(length[i]);
}
const q = (v, p) => v.sort((x, y) => x - y)[Math.floor((v.length - 1) * p)].toFixed(1);
console.log(
  `${root}: ${n} operation turns, ${n - withoutGc.length} overlapping a GC; p50 ${q(all, 0.5)} µs, p99 ${q(all, 0.99)} µs; ` +
    `without the GC turns: p99 ${q(withoutGc, 0.99)} µs`,
);
rmSync(dir, { recursive: true, force: true });
