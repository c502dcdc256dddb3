// Evidence for docs/bench.md (see there). Run from the repository root after npm run build:
//   node bench/evidence/inline.mjs [dir root]
// Evidence: the disk cycle with the lease's commit run inline (blocking, as on tmpfs) vs on the
// libuv pool (the default on disk), alternating; and the bare thread-pool round trip.
import { Lease } from '../../dist/index.js';
import { kIO } from '../../dist/flock/lease.js';
import { fileIO } from '../../dist/flock/io.js';
import { createRequire } from 'node:module';
import { rmSync, statSync, promises as fsp } from 'node:fs';
const require = createRequire(import.meta.url);
const addon = require('../../native/build/Release/flocklease.node');
const inlineIO = {
  ...fileIO,
  async commit(dir, plan) {
    const { record, data, live, adoptFrom, remove } = plan;
    return addon.commitSync(record, dir, data, live, adoptFrom, remove?.[0], remove?.[1]);
  },
};
const root = process.argv[2] ?? '/tmp';
const mk = (name, io) => {
  const d = `${root}/inl-${name}`;
  rmSync(d, { recursive: true, force: true });
  return new Lease(d, io ? { [kIO]: io } : {});
};
const pool = mk('pool');
const inline = mk('inline', inlineIO);
const med = (a) => {
  const s = [...a].sort((x, y) => x - y);
  return s[s.length >> 1];
};
async function run(lease, n) {
  const t = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const g = await lease.acquire('id-' + (i % 4), 'me');
    await lease.release(g);
    t.push((performance.now() - t0) * 1000);
  }
  return med(t);
}
await run(pool, 100);
await run(inline, 100);
const r = { pool: [], inline: [] };
for (let k = 0; k < 6; k++) {
  r.pool.push(await run(pool, 300));
  r.inline.push(await run(inline, 300));
}
console.log(
  `${root}: cycle p50 via the pool ${med(r.pool).toFixed(0)} µs, inline ${med(r.inline).toFixed(0)} µs (medians of 6 alternating rounds)`,
);
const hop = [];
const sync = [];
for (let i = 0; i < 3000; i++) {
  let t0 = performance.now();
  await fsp.stat('/');
  hop.push((performance.now() - t0) * 1000);
  t0 = performance.now();
  statSync('/');
  sync.push((performance.now() - t0) * 1000);
}
console.log(
  `thread-pool round trip: await fs.promises.stat p50 ${med(hop).toFixed(1)} µs vs statSync ${med(sync).toFixed(1)} µs`,
);
