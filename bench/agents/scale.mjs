// Scale: one process holds many ids. Run with --expose-gc:
//   node --expose-gc scale.mjs <dir> <ids> <iterations> <warmup> <rounds>
// Per round, in a fresh subdirectory: with 1 id held, the latency of (a) a renew of that held id and
// (b) an acquire + release of a fresh id (4 rotating ones); then it acquires ids-1 more (keeping
// every grant, as a caller would), measures JS heap (after gc) and open fds (/proc/self/fd) per
// held lease, measures (a) and (b) again with `ids` held, releases all but one and measures (a) and
// (b) a third time (1 held again, in a directory that keeps every id's files: so a change with the
// held count can be told from drift and from the directory's size), and releases the last. MemoryLease's
// heap per held lease is measured alongside for reference. Prints one JSON line.
import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { Lease, MemoryLease } from '../../dist/index.js';
import { roundsSummary, round } from '../lib/stats.mjs';
import { tinySamples } from '../lib/tiny.mjs';

const [root, idsArg, iterationsArg, warmupArg, roundsArg] = process.argv.slice(2);
const ids = Number(idsArg);
const iterations = Number(iterationsArg);
const warmup = Number(warmupArg);
const rounds = Number(roundsArg);
if (typeof global.gc !== 'function') throw new Error('run with --expose-gc');

function heapUsed() {
  for (let i = 0; i < 4; i++) global.gc();
  return process.memoryUsage().heapUsed;
}
const openFds = () => readdirSync('/proc/self/fd').length;

async function latencies(lease, held) {
  let grant = held;
  const renew = await tinySamples(
    'renew',
    async () => {
      grant = await lease.renew(grant);
    },
    { iterations, warmup },
  );
  let i = 0;
  const cycle = await tinySamples(
    'cycle',
    async () => {
      const g = await lease.acquire(`fresh-${i++ % 4}`, 'scale');
      await lease.release(g);
    },
    { iterations, warmup },
  );
  return { renew, cycle, grant };
}

const samples = { renew1: [], renewN: [], cycle1: [], cycleN: [], renew1After: [], cycle1After: [] };
const memory = [];
for (let r = 0; r < rounds; r++) {
  const dir = join(root, `scale-${r}`);
  const lease = new Lease(dir);
  const grants = [await lease.acquire('held-0', 'scale')];
  const one = await latencies(lease, grants[0]);
  grants[0] = one.grant;
  samples.renew1.push(one.renew);
  samples.cycle1.push(one.cycle);

  const heapBefore = heapUsed();
  const fdsBefore = openFds();
  for (let i = 1; i < ids; i++) grants.push(await lease.acquire(`held-${i}`, 'scale'));
  const heapHeld = heapUsed();
  const fdsHeld = openFds();
  // The same without the caller's grants: what the lease itself keeps per held lease.
  const tokens = new BigUint64Array(grants.map((g) => g.token));
  grants.length = 1;
  const heapLeaseOnly = heapUsed();

  const many = await latencies(lease, grants[0]);
  samples.renewN.push(many.renew);
  samples.cycleN.push(many.cycle);
  grants[0] = many.grant;

  for (let i = 1; i < ids; i++) {
    await lease.release({ sessionId: `held-${i}`, owner: 'scale', token: tokens[i], expiry: new Date() });
  }
  // 1 held again, in a directory that now has every id's lock and record files.
  const after = await latencies(lease, grants[0]);
  samples.renew1After.push(after.renew);
  samples.cycle1After.push(after.cycle);
  grants[0] = after.grant;
  await lease.release(grants[0]);
  const fdsAfter = openFds();
  memory.push({
    heapPerLeaseBytes: round((heapHeld - heapBefore) / (ids - 1)),
    heapPerLeaseWithoutGrantsBytes: round((heapLeaseOnly - heapBefore) / (ids - 1)),
    fdsPerLease: round((fdsHeld - fdsBefore) / (ids - 1)),
    // fdsBefore counted held-0's liveness fd, released too by now: 0 means nothing leaked.
    fdsLeftAfterRelease: fdsAfter - (fdsBefore - 1),
  });
  rmSync(dir, { recursive: true, force: true });
}

// MemoryLease, for reference: heap per held lease (with grants).
const mem = new MemoryLease();
const before = heapUsed();
const memGrants = [];
for (let i = 0; i < ids; i++) memGrants.push(await mem.acquire(`held-${i}`, 'scale'));
const memoryLeaseHeap = round((heapUsed() - before) / ids);

process.stdout.write(
  `${JSON.stringify({
    ids,
    renew: {
      at1: roundsSummary(samples.renew1),
      atN: roundsSummary(samples.renewN),
      at1After: roundsSummary(samples.renew1After),
    },
    cycle: {
      at1: roundsSummary(samples.cycle1),
      atN: roundsSummary(samples.cycleN),
      at1After: roundsSummary(samples.cycle1After),
    },
    memory,
    memoryLeaseHeapPerLeaseBytes: memoryLeaseHeap,
    heldMemoryLeases: memGrants.length,
  })}\n`,
);
