// Evidence for docs/bench.md ("The sixth round"): acquire + release cycles of two builds of the
// Lease and of the Node floor (bench/lib/node-floor.mjs) on a real directory, in interleaved
// rounds whose order alternates; µs per cycle. Pin it to one vCPU (taskset) as the cycle figure
// pins its rounds. Build the other one first, e.g. `git worktree add /tmp/old <rev>` and
// `npx tsc -p tsconfig.json` there (its native/ may be a link to this one's).
//
//   node bench/evidence/builds.mjs <other dist dir> [dir=/dev/shm] [cycles per round=4000] [rounds=8]
import { rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { nodeFloor } from '../lib/node-floor.mjs';
import { interleave } from './interleave.mjs';

const [otherDist, root = '/dev/shm', cyclesArg = '4000', roundsArg = '8'] = process.argv.slice(2);
if (otherDist === undefined) throw new Error('usage: builds.mjs <other dist dir> [dir] [cycles] [rounds]');
const N = Number(cyclesArg);
const dirs = [];
const scratch = (name) => {
  const dir = join(root, `builds-${name}-${process.pid}`);
  rmSync(dir, { recursive: true, force: true });
  dirs.push(dir);
  return dir;
};

async function leaseLoop(name, distHref) {
  const { Lease } = await import(`${distHref}/index.js`);
  const lease = new Lease(scratch(name));
  return async (n) => {
    for (let i = 0; i < n; i++) await lease.release(await lease.acquire(`id-${i & 3}`, 'me'));
  };
}

const loops = {
  lease: await leaseLoop('this', new URL('../../dist', import.meta.url).href),
  [`lease (${otherDist})`]: await leaseLoop('other', pathToFileURL(resolve(otherDist)).href),
};
const floor = nodeFloor(scratch('node-floor'));
loops['node floor'] = async (n) => {
  for (let i = 0; i < n; i++) await (await floor.lock(`id-${i & 3}`))();
};

try {
  await interleave(loops, { cycles: N, rounds: Number(roundsArg), digits: 1 });
} finally {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
}
