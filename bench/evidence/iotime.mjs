// Evidence for docs/bench.md (see there). Run from the repository root after npm run build:
//   node bench/evidence/iotime.mjs [dir root]
// Which synchronous I/O calls of the lease (main thread) are slow on disk? Wrap each LeaseIO call.
import { Lease } from '../../dist/index.js';
import { kIO } from '../../dist/flock/lease.js';
import { fileIO } from '../../dist/flock/io.js';
import { rmSync } from 'node:fs';
const root = process.argv[2] ?? '/tmp';
const times = {};
const io = {};
for (const [name, fn] of Object.entries(fileIO)) {
  if (name === 'commit') {
    io.commit = fn;
    continue;
  } // async, on the worker
  io[name] = (...args) => {
    const t0 = performance.now();
    try {
      return fn(...args);
    } finally {
      (times[name] ??= []).push((performance.now() - t0) * 1000);
    }
  };
}
const dir = `${root}/iotime`;
rmSync(dir, { recursive: true, force: true });
const lease = new Lease(dir, { [kIO]: io });
const gcs = [];
const { PerformanceObserver } = await import('node:perf_hooks');
new PerformanceObserver((l) => {
  for (const e of l.getEntries()) gcs.push(e.duration * 1000);
}).observe({ entryTypes: ['gc'] });
const turn = () => new Promise((r) => setImmediate(r));
const N = +(process.argv[3] ?? 3000);
for (let i = 0; i < N; i++) {
  await turn();
  const g = await lease.acquire('id-' + (i % 4), 'me');
  await turn();
  await lease.release(g);
}
await turn();
for (const [name, v] of Object.entries(times)) {
  v.sort((a, b) => a - b);
  console.log(
    `${name.padEnd(18)} n=${String(v.length).padStart(5)} p50=${v[v.length >> 1].toFixed(1).padStart(6)}µs p99=${v[Math.floor(v.length * 0.99)].toFixed(1).padStart(7)}µs max=${v[v.length - 1].toFixed(0).padStart(6)}µs`,
  );
}
gcs.sort((a, b) => a - b);
console.log(
  `gc pauses: n=${gcs.length} p50=${gcs[gcs.length >> 1]?.toFixed(0)}µs max=${gcs[gcs.length - 1]?.toFixed(0)}µs (one every ${((2 * N) / gcs.length).toFixed(0)} operations)`,
);
