// One of two processes taking turns with a lock, as the C and Node floors' hand-offs are driven
// (bench/lib/c-floor.mjs, floorHandOffs): no parent in between. Each cycle: a waiting lock(), hold
// it `hold ms`, release, idle `quiet ms` (so that what a releaser does next is not in the other's
// hand-off). Prints, after its last cycle, when each acquire resolved and when each release let go
// and was called (CLOCK_MONOTONIC ns):
//   node turns.mjs <impl> <dir> <cycles> <hold ms> <quiet ms>
//     → {"acquiredNs":[…],"releasedNs":[…],"releaseCalledNs":[…]}
// For the Lease "let go" is just before the close of its `.live` file that wakes the waiter, taken
// through its I/O seam before the system call (a woken waiter that takes this CPU first cannot
// delay it), the point the floors' hand-offs are timed from too. The peers have no such close: their
// release is one file-system call, and it is timed from the call.
import { fileIO } from '../../dist/flock/io.js';
import { DEFAULT_POLL_MS, IMPLS, PROPER_LOCKFILE_MIN_STALE_MS } from '../lib/impls.mjs';
import { sleep } from '../lib/stats.mjs';

const [key, dir, cyclesArg, holdArg, quietArg] = process.argv.slice(2);
const now = () => Number(process.hrtime.bigint());

let letGoNs;
/** fileIO, stamping the first descriptor close of each release (its `.live` generation lock). */
const stampingIO = {
  ...fileIO,
  closeFile(fd) {
    letGoNs ??= now();
    fileIO.closeFile(fd);
  },
};
const impl = IMPLS[key].open(dir, {
  wait: true,
  pollMs: DEFAULT_POLL_MS,
  staleMs: PROPER_LOCKFILE_MIN_STALE_MS,
  io: key === 'lease' ? stampingIO : undefined,
});

const acquiredNs = [];
const releasedNs = [];
const releaseCalledNs = [];
for (let i = 0; i < Number(cyclesArg); i++) {
  const release = await impl.lock('wake');
  acquiredNs.push(now());
  await sleep(Number(holdArg));
  const called = now();
  letGoNs = undefined;
  await release();
  releaseCalledNs.push(called);
  releasedNs.push(key === 'lease' ? letGoNs : called);
  await sleep(Number(quietArg));
}
process.stdout.write(`${JSON.stringify({ acquiredNs, releasedNs, releaseCalledNs })}\n`);
