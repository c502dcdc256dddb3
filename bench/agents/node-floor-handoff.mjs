// The Node floor of a fair hand-off: c-floor.c's `fair_cycle` (first come first served, the releaser
// commits the record naming the next in line, the next one woken by that release) done by a Node
// process through the lease's own addon calls and its watch, with none of the Lease's logic (no
// gate, no queue parsing, no record decoding, no grants; like the Lease's hand-off, and unlike
// c-floor.c, the woken process reads the record without taking the transition lock). What any Node lease built on flock pays
// for a hand-off: the event loop's wake-up, the addon's calls and the durable commit (a pool
// thread on disk, inline on tmpfs, as the Lease does). Same command line and output as bench/out/c-floor:
//   node node-floor-handoff.mjs <dir> --contend-fair <seconds> <durable> [warmup seconds]  → {"waitsNs":[…],"cycles":n}
//   node node-floor-handoff.mjs <dir> --handoff <cycles> <durable> <hold ms> [quiet ms]  → {"acquiredNs":[…],"releasedNs":[…]}
import { mkdirSync } from 'node:fs';
import { fileIO } from '../../dist/flock/io.js';
import { unlocked, waitTransition } from '../lib/node-floor.mjs';

const [dir, mode, countArg, durableArg, extra, quietArg] = process.argv.slice(2);
const io = fileIO;
const now = () => process.hrtime.bigint();
const lockPath = `${dir}/fair.lock`;
const recordPath = `${dir}/fair.lease.json`;

mkdirSync(dir, { recursive: true });
io.prepareDir(dir); // decides, as the Lease does, whether commits run inline (tmpfs) or on a pool thread
if (durableArg !== '1') throw new Error('node floor hand-off: only the durable commit is measured');

function recordOf(owner, token) {
  return `{"owner":"${owner}","token":${token},"expiry":"2026-11-29T10:00:00.000Z"}`;
}

/** One fair acquire + release; `acquired` and `released` times (ns). */
async function fairCycle(token, holdMs) {
  let lfd = await waitTransition(lockPath);
  const ticket = Number(Buffer.from(io.readLockData(lfd) ?? '0').toString()) + 1;
  io.writeLockData(lfd, String(ticket));
  const mine = `${dir}/fair.${ticket}.wait`;
  const mfd = io.lockFile(mine);
  if (mfd === undefined) throw new Error(`${mine} is locked`);
  io.unlockTransition(lfd);
  // The one ahead lets go of its ticket file when it releases (or is gone already); watched as the
  // Lease watches a waiter's .wait.
  if (ticket > 1) await unlocked(`${dir}/fair.${ticket - 1}.wait`, io, 'writers');
  // The release committed the record naming us before it woke us: read it without the transition
  // lock, as the Lease's hand-off does (waiting for that lock would be a second wake-up).
  io.readRecord(recordPath);
  const acquired = now();
  if (holdMs > 0) await new Promise((resolve) => setTimeout(resolve, holdMs));
  lfd = await waitTransition(lockPath);
  await io.commit(dir, { record: recordPath, data: recordOf(`p${process.pid}`, token + 1n) }); // the hand-off commit
  io.removeFile(mine);
  const released = now(); // as it lets go: see c-floor.c's fair_cycle
  io.closeFile(mfd); // wakes the next in line
  io.unlockTransition(lfd);
  return { acquired, released };
}

// The addon's watches do not keep a process alive (a Lease's waits have a timer too): this does.
const keepAlive = setInterval(() => {}, 1 << 30);
let token = BigInt(process.pid) << 32n;
if (mode === '--contend-fair') {
  const warm = now() + BigInt(Math.round(Number(extra ?? 0) * 1e9));
  const until = warm + BigInt(Math.round(Number(countArg) * 1e9));
  const waits = [];
  for (let start = now(); start < until; start = now()) {
    const { acquired } = await fairCycle(++token, 0);
    if (start >= warm) waits.push(acquired - start);
  }
  process.stdout.write(`{"waitsNs":[${waits.join(',')}],"cycles":${waits.length}}\n`);
} else if (mode === '--handoff') {
  const acquired = [];
  const released = [];
  for (let i = 0; i < Number(countArg); i++) {
    const cycle = await fairCycle(++token, Number(extra));
    acquired.push(cycle.acquired);
    released.push(cycle.released);
    // Idle after letting go, as the Lease's holder is (see bench/figures/takeover.mjs).
    if (quietArg !== undefined) await new Promise((resolve) => setTimeout(resolve, Number(quietArg)));
  }
  process.stdout.write(`{"acquiredNs":[${acquired.join(',')}],"releasedNs":[${released.join(',')}]}\n`);
} else {
  clearInterval(keepAlive);
  process.stderr.write(
    'usage: node-floor-handoff.mjs <dir> --contend-fair <s> 1 [warmup s] | --handoff <cycles> 1 <hold ms>\n',
  );
  process.exit(64);
}
clearInterval(keepAlive);
