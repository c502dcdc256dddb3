// Evidence for docs/bench.md (see there). Run from the repository root after npm run build:
//   node bench/evidence/starve.mjs [dir root]
// A bare `await` loop of lease operations on tmpfs never yields to the event loop: a 1 ms timer
// set before it fires only after the whole loop.
import { Lease } from '../../dist/index.js';
import { rmSync } from 'node:fs';
for (const root of ['/dev/shm', '/tmp']) {
  const dir = `${root}/starve`;
  rmSync(dir, { recursive: true, force: true });
  const lease = new Lease(dir);
  for (let i = 0; i < 100; i++) await lease.release(await lease.acquire('w' + (i % 4), 'me'));
  const N = root === '/tmp' ? 200 : 2000;
  const t0 = performance.now();
  let firedAt;
  setTimeout(() => (firedAt = performance.now() - t0), 1);
  for (let i = 0; i < N; i++) await lease.release(await lease.acquire('x' + (i % 4), 'me'));
  const loopMs = performance.now() - t0;
  await new Promise((r) => setTimeout(r, 5));
  console.log(
    `${root}: ${N} awaited acquire+release in ${loopMs.toFixed(1)} ms; a 1 ms timer set before the loop fired at ${firedAt.toFixed(1)} ms`,
  );
}
