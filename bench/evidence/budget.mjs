// Evidence for docs/bench.md ("The per-step budget"). Run from the repository root after npm run build:
//   node --expose-gc bench/evidence/budget.mjs [disk dir] [tmpfs dir] [cycles] [dist dir] [disk cycles]
// Where the µs of one acquire + release go, on disk and on tmpfs: each native step (every LeaseIO
// call timed around the addon, so the Node-API crossing is in it; on disk the commit's time includes
// the worker-thread hop), the record codec (timed on its own), GC (perf_hooks 'gc' entries), and the
// rest: the JS decision, gate, promises and paths. Also CPU time (process.cpuUsage) per cycle.
// `dist dir` picks the build to measure (default: dist), for before/after comparisons.
import { rmSync } from 'node:fs';
import { PerformanceObserver } from 'node:perf_hooks';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const [diskRoot = '/tmp', tmpfsRoot = '/dev/shm', cyclesArg = '3000', distArg = 'dist', diskCyclesArg = cyclesArg] =
  process.argv.slice(2);
const dist = pathToFileURL(resolve(distArg)).href;
const { Lease } = await import(`${dist}/index.js`);
const { kIO } = await import(`${dist}/flock/lease.js`);
const { fileIO } = await import(`${dist}/flock/io.js`);
const { parseRecord, formatRecord } = await import(`${dist}/flock/record.js`);

const turn = () => new Promise((r) => setImmediate(r));

async function measure(root, N) {
  const times = {};
  const io = {};
  for (const [name, fn] of Object.entries(fileIO)) {
    const record = (t0) => (times[name] ??= []).push((performance.now() - t0) * 1000);
    io[name] =
      name === 'commit'
        ? async (...args) => {
            const t0 = performance.now();
            try {
              return await fn(...args);
            } finally {
              record(t0);
            }
          }
        : (...args) => {
            const t0 = performance.now();
            try {
              return fn(...args);
            } finally {
              record(t0);
            }
          };
  }
  const dir = `${root}/budget-${process.pid}`;
  rmSync(dir, { recursive: true, force: true });
  const lease = new Lease(dir, { [kIO]: io });
  for (let i = 0; i < 300; i++) await lease.release(await lease.acquire(`id-${i % 4}`, 'me')); // warm-up
  for (const k of Object.keys(times)) delete times[k];
  let gcMs = 0;
  const observer = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) gcMs += e.duration;
  });
  observer.observe({ entryTypes: ['gc'] });
  globalThis.gc?.();
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  for (let i = 0; i < N; i++) await lease.release(await lease.acquire(`id-${i % 4}`, 'me'));
  const wallUs = ((performance.now() - t0) * 1000) / N;
  const cpu = process.cpuUsage(cpu0);
  await turn();
  observer.disconnect();
  rmSync(dir, { recursive: true, force: true });
  const steps = Object.fromEntries(
    Object.entries(times).map(([name, v]) => {
      const meanUs = v.reduce((a, b) => a + b, 0) / v.length;
      return [name, { perCycle: v.length / N, meanUs }];
    }),
  );
  return { wallUs, userUs: cpu.user / N, systemUs: cpu.system / N, gcUs: (gcMs * 1000) / N, steps };
}

function codec() {
  const text = formatRecord({ owner: 'me', token: 1796047534164000n, expiryMs: Date.now() + 30_000, session: 'id-1' });
  const bytes = Buffer.from(text);
  const time = (fn) => {
    for (let i = 0; i < 20_000; i++) fn();
    const t0 = performance.now();
    for (let i = 0; i < 100_000; i++) fn();
    return ((performance.now() - t0) * 1000) / 100_000;
  };
  return {
    decodeUs: time(() => parseRecord(bytes)),
    encodeUs: time(() => formatRecord({ owner: 'me', token: 17960475341640n, expiryMs: 1796047534164, session: 's' })),
  };
}

const c = codec();
const out = { codec: c };
for (const [fs, root, cycles] of [
  ['disk', diskRoot, Number(diskCyclesArg)],
  ['tmpfs', tmpfsRoot, Number(cyclesArg)],
]) {
  const m = await measure(root, cycles);
  const nativeUs = Object.values(m.steps).reduce((a, s) => a + s.perCycle * s.meanUs, 0);
  const codecUs = 2 * (c.decodeUs + c.encodeUs); // acquire and release each read and write one record
  out[fs] = { cycles, ...m, nativeUs, codecUs, restUs: m.wallUs - nativeUs - codecUs - m.gcUs };
}
console.log(JSON.stringify(out, (k, v) => (typeof v === 'number' ? Math.round(v * 100) / 100 : v), 1));
