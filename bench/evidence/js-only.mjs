// Evidence for docs/bench.md ("The sixth round"): the JavaScript of an acquire + release alone.
// The Lease and the Node floor (bench/lib/node-floor.mjs) run over an in-memory LeaseIO that makes
// no system call, so what is left is each one's own JavaScript: for the Lease its decision, record
// codec, gate, paths, grants and promises; for the Node floor its few lines. Interleaved rounds,
// µs per cycle. With a second build, both Leases alternate (before/after comparisons).
//
//   node bench/evidence/js-only.mjs [cycles per round=100000] [rounds=4] [other dist dir]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { nodeFloor } from '../lib/node-floor.mjs';
import { interleave } from './interleave.mjs';

const [cyclesArg = '100000', roundsArg = '4', otherDist] = process.argv.slice(2);
const N = Number(cyclesArg);

/** A lease directory in a Map: records by path, fresh descriptor numbers, nobody else. */
function memoryIO() {
  const records = new Map();
  const encoder = new TextEncoder();
  let nextFd = 1000;
  return {
    prepareDir() {},
    tryLockTransition: () => nextFd++,
    unlockTransition() {},
    readRecord: (path) => records.get(path),
    probeLive: () => false,
    commit(dir, plan) {
      records.set(plan.record, encoder.encode(plan.data));
      return Promise.resolve({ liveFd: plan.live === undefined ? -1 : nextFd++, removalErrors: [] });
    },
    removeFile() {},
    closeFile() {},
    lockFile: () => nextFd++,
    sameFile: () => false,
    readLockData: () => undefined,
    writeLockData() {},
    watchUnlock: () => false,
  };
}

async function leaseLoop(distHref) {
  const { Lease } = await import(`${distHref}/index.js`);
  const { kIO } = await import(`${distHref}/flock/lease.js`);
  const lease = new Lease('/nonexistent/js-only', { [kIO]: memoryIO() });
  return async (n) => {
    for (let i = 0; i < n; i++) await lease.release(await lease.acquire(`id-${i & 3}`, 'me'));
  };
}

const loops = { lease: await leaseLoop(new URL('../../dist', import.meta.url).href) };
if (otherDist !== undefined) loops[`lease (${otherDist})`] = await leaseLoop(pathToFileURL(resolve(otherDist)).href);
const floorDir = mkdtempSync(join(tmpdir(), 'js-only-')); // made by nodeFloor, never written
const floor = nodeFloor(floorDir, { io: memoryIO() });
loops['node floor'] = async (n) => {
  for (let i = 0; i < n; i++) await (await floor.lock(`id-${i & 3}`))();
};

await interleave(loops, { cycles: N, rounds: Number(roundsArg), digits: 2 });
rmSync(floorDir, { recursive: true, force: true });
