// The protocol floor: one of N Node processes making, through the Lease's own I/O layer (fileIO:
// the addon's calls) and its watch, every call a contended Lease cycle makes, in the same order,
// with none of the Lease's JavaScript logic (no gate, no record or queue codec, no clock, no
// grants, no diagnostics). T6 judges the Lease against it: what is left between the two is the
// Lease's own logic, since both pay the same runtime, addon crossings, commits and wake-ups.
// Same command line and output as the C floor's fair contention (bench/c-floor.c):
//   node protocol-floor.mjs <dir> --contend-fair <seconds> 1 [warmup seconds]  → {"waitsNs":[…],"cycles":n}
import { mkdirSync } from 'node:fs';
import { fileIO as io } from '../../dist/flock/io.js';
import { whenUnlocked } from '../../dist/flock/watch.js';
import { waitTransition } from '../lib/node-floor.mjs';

const [dir, mode, secondsArg, durableArg, warmupArg = '0'] = process.argv.slice(2);
if (mode !== '--contend-fair' || durableArg !== '1') {
  process.stderr.write('usage: protocol-floor.mjs <dir> --contend-fair <seconds> 1 [warmup seconds]\n');
  process.exit(64);
}

// What the calls are made on: the Lease's file names for one id, and records in its layout, with a
// fixed expiry because the floor decodes none.
const ID = 'contended';
const lockPath = `${dir}/${ID}.lock`;
const recordPath = `${dir}/${ID}.lease.json`;
const livePath = (token) => `${dir}/${ID}.${token}.live`;
const waitPath = (ticket) => `${dir}/${ID}.${ticket}.wait`;
const me = `p${process.pid}`;
const recordOf = (owner, token) =>
  `{"owner":"${owner}","token":${token},"expiry":"2099-01-01T00:00:00.000Z","session":"${ID}"}`;
// The least parsing the calls need: the token by indexOf, the owner by position, the queue as
// `ticket:owner` words.
const tokenOf = (text) => {
  const at = text === undefined ? -1 : text.indexOf('"token":');
  return at < 0 ? 0n : BigInt(text.slice(at + 8, text.indexOf(',', at)));
};
const ownerOf = (text) => (text === undefined ? '' : text.slice(10, text.indexOf('"', 10)));
const queueOf = (lfd) => (io.readLockData(lfd) ?? '').split(' ').filter(Boolean);
const ticketOf = (word) => Number(word.split(':')[0]);
const writeQueue = (lfd, queue, before) => {
  const text = queue.join(' ');
  if (text !== before) io.writeLockData(lfd, text); // as the Lease: only a changed queue is written
};

/** The Lease's watch of `path` (`watchMode`: as it watches that kind of file): resolves once let go. */
const watch = (path, watchMode) =>
  new Promise((resolve) => {
    if (!whenUnlocked(io, path, { over: false }, resolve, watchMode)) resolve();
  });

// ─── The Lease's calls ──────────────────────────────────────────────────────────────────────────
// The one function to update when the Lease's contended path changes (src/flock/lease.ts #attempt,
// waitline.ts, handoff.ts give): the same LeaseIO calls in the same order, nothing else.
/**
 * One contended cycle: a waiting acquire, then a release. Resolves to when the lease was held.
 *   acquire: the transition lock; a first try reads the queue, and the record only if nobody is in
 *            line (then the holder's `.live` is probed unless released), and free: commits a new
 *            generation (the old `.live` removed); else the waiter's own `.wait` is created and
 *            flocked and the queue written. A later try reads the record; handed to us (our
 *            `.wait` is its `.live`: sameFile) it is held; released, the queue is read, our entry
 *            dropped and written, and our `.wait` adopted as the new `.live`; held, the holder's
 *            `.live` probed and the queue read. Then the lock is let go and the one ahead (its
 *            `.wait`, writers' closes) or the holder (its `.live`) watched, and it looks again.
 *   release: the lock; the record; the queue; the front waiter's `.wait` probed; the hand-off
 *            commit (its `.wait` renamed to the next `.live`, the record, ours removed) and the
 *            queue written, or a tombstone; the lock let go; our `.live` closed (waking the front).
 */
async function contendedCycle() {
  let held; // { token, fd }
  let place; // { ticket, fd } while in line
  while (held === undefined) {
    const lfd = await waitTransition(lockPath, io);
    let ahead; // what to watch
    if (place === undefined) {
      const queue = queueOf(lfd);
      const text = queue.length > 0 ? undefined : io.readRecord(recordPath);
      const owner = ownerOf(text);
      const token = tokenOf(text);
      if (queue.length === 0 && (owner === '' || !io.probeLive(livePath(token)))) {
        const { liveFd } = await io.commit(dir, {
          record: recordPath,
          data: recordOf(me, token + 1n),
          live: livePath(token + 1n),
          remove: text === undefined ? undefined : [livePath(token)],
        });
        io.unlockTransition(lfd);
        held = { token: token + 1n, fd: liveFd };
        break;
      }
      const last = queue.length === 0 ? 0 : ticketOf(queue.at(-1));
      const ticket = Math.max(last + 1, Math.floor((performance.timeOrigin + performance.now()) * 1000));
      place = { ticket, fd: io.lockFile(waitPath(ticket)) };
      queue.push(`${ticket}:${me}`);
      io.writeLockData(lfd, queue.join(' '));
      ahead = queue.length > 1 ? waitPath(ticketOf(queue.at(-2))) : livePath(token);
    } else {
      const text = io.readRecord(recordPath);
      const owner = ownerOf(text);
      const token = tokenOf(text);
      if (owner === me && io.sameFile(place.fd, livePath(token))) {
        io.unlockTransition(lfd); // handed to us
        held = { token, fd: place.fd };
        break;
      }
      const released = owner === '';
      if (!released) io.probeLive(livePath(token)); // held: the Lease's holderAlive
      const queue = queueOf(lfd);
      const before = queue.join(' ');
      const at = queue.findIndex((word) => ticketOf(word) === place.ticket);
      if (at <= 0 && released) {
        // Released to nobody while first in (or dropped from) the line: taken, as the Lease does.
        if (at === 0) queue.shift();
        writeQueue(lfd, queue, before);
        await io.commit(dir, {
          record: recordPath,
          data: recordOf(me, token + 1n),
          live: livePath(token + 1n),
          adoptFrom: waitPath(place.ticket),
          remove: [livePath(token)],
        });
        io.unlockTransition(lfd);
        held = { token: token + 1n, fd: place.fd };
        break;
      }
      ahead = at > 0 ? waitPath(ticketOf(queue[at - 1])) : livePath(token);
    }
    io.unlockTransition(lfd);
    await watch(ahead, ahead.endsWith('.wait') ? 'writers' : undefined);
  }
  const acquired = process.hrtime.bigint();

  const lfd = await waitTransition(lockPath, io);
  const next = tokenOf(io.readRecord(recordPath)) + 1n;
  const queue = queueOf(lfd);
  const before = queue.join(' ');
  const ours = livePath(held.token);
  let front; // the first live waiter: [ticket, owner]
  while (queue.length > 0 && front === undefined) {
    const [ticket, owner] = queue[0].split(':');
    if (io.probeLive(waitPath(ticket))) front = [ticket, owner];
    else {
      queue.shift(); // gave up: the next one
      io.removeFile(waitPath(ticket));
    }
  }
  if (front === undefined) {
    writeQueue(lfd, queue, before);
    await io.commit(dir, { record: recordPath, data: recordOf('', next), remove: [ours] });
  } else {
    await io.commit(dir, {
      record: recordPath,
      data: recordOf(front[1], next),
      live: livePath(next),
      adoptFrom: waitPath(front[0]),
      remove: [ours],
    });
    queue.shift();
    writeQueue(lfd, queue, before);
  }
  io.unlockTransition(lfd);
  io.closeFile(held.fd);
  return acquired;
}
// ─────────────────────────────────────────────────────────────────────────────────────────────────

mkdirSync(dir, { recursive: true });
io.prepareDir(dir); // commits inline on tmpfs, on a pool thread on disk, as the Lease's
// The addon's watches do not keep a process alive (a Lease's waits have a timer too): this does.
const keepAlive = setInterval(() => {}, 1 << 30);
const start = process.hrtime.bigint();
const warm = start + BigInt(Math.round(Number(warmupArg) * 1e9));
const until = warm + BigInt(Math.round(Number(secondsArg) * 1e9));
const waits = [];
for (let at = start; at < until; at = process.hrtime.bigint()) {
  const acquired = await contendedCycle();
  if (at >= warm) waits.push(acquired - at);
}
process.stdout.write(`{"waitsNs":[${waits.join(',')}],"cycles":${waits.length}}\n`);
clearInterval(keepAlive);
