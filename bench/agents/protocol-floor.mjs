// The protocol floor: one of N Node processes making, through the Lease's own I/O layer (fileIO:
// the addon's calls) and its watch, every call a contended Lease cycle makes, in the same order,
// with none of the Lease's JavaScript logic (no gate, no record or queue codec, no clock, no
// grants, no diagnostics). T6 judges the Lease against it: what is left between the two is the
// Lease's own logic, since both pay the same runtime, addon crossings, commits and wake-ups.
// Same command line and output as the C floor's fair contention (bench/c-floor.c):
//   node protocol-floor.mjs <dir> --contend-fair <seconds> 1 [warmup seconds]  → {"waitsNs":[…],"cycles":n}
import { mkdirSync } from 'node:fs';
import { fileIO as io } from '../../dist/flock/io.js';
import { recordLayout } from '../../dist/flock/record.js';
import { whenUnlocked } from '../../dist/flock/watch.js';
import { waitTransition } from '../lib/node-floor.mjs';

const [dir, mode, secondsArg, durableArg, warmupArg = '0'] = process.argv.slice(2);
if (mode !== '--contend-fair' || durableArg !== '1') {
  process.stderr.write('usage: protocol-floor.mjs <dir> --contend-fair <seconds> 1 [warmup seconds]\n');
  process.exit(64);
}

// What the calls are made on: the Lease's file names for one id, and records laid out as it lays
// them out (recordLayout), with a fixed expiry because the floor decodes none.
const ID = 'contended';
const lockPath = `${dir}/${ID}.lock`;
const recordPath = `${dir}/${ID}.lease.json`;
const livePath = (token) => `${dir}/${ID}.${token}.live`;
const waitPath = (ticket) => `${dir}/${ID}.${ticket}.wait`;
const EXPIRY = '2099-01-01T00:00:00.000Z';
const me = `p${process.pid}`;
const mine = recordLayout(me, ID);
const recordOf = (owner, token) => {
  const { before, between, after } = recordLayout(owner, ID);
  return `${before}${token}${between}${EXPIRY}${after}`;
};
// The least parsing the calls need: the token by indexOf, the owner by position, the queue as
// `ticket:owner` words.
const tokenOf = (text) => {
  const at = text === undefined ? -1 : text.indexOf('"token":');
  return at < 0 ? 0n : BigInt(text.slice(at + 8, text.indexOf(',', at)));
};
const ownerOf = (text) => (text === undefined ? '' : text.slice(10, text.indexOf('"', 10)));
const queueOf = (lfd) => (io.readLockData(lfd) ?? '').split(' ').filter(Boolean);
const ticketOf = (word) => Number(word.split(':')[0]);

/** The Lease's watch of `path` with its hand-off probe: resolves to the token of a hand-off to
 * this waiter (`place`), or undefined. */
const watch = (path, place, watchMode) =>
  new Promise((resolve) => {
    const probe = { record: recordPath, fd: place.fd, livePrefix: `${dir}/${ID}.`, liveSuffix: '.live', ...mine };
    const started = whenUnlocked(io, path, { over: false }, (token) => resolve(token ?? undefined), probe, watchMode);
    if (!started) resolve(undefined);
  });

// ─── The Lease's calls ──────────────────────────────────────────────────────────────────────────
// The one function to update when the Lease's contended path changes (src/flock/lease.ts: acquire's
// tries and release): the same LeaseIO calls in the same order, nothing else.
/**
 * One contended cycle: a waiting acquire, then a release. Resolves to when the lease was held.
 *   acquire: the transition lock; a first try reads the queue, and the record only if nobody is in
 *            line (a later try: the record, then the queue); free and nobody in line: commit a new
 *            generation; else the waiter's own `.wait` created and flocked, the queue written, the
 *            lock let go, and a watch with the hand-off probe on the one ahead (its `.wait`,
 *            writers' closes) or the holder (its `.live`); a report without a hand-off looks again.
 *   release: the lock; the queue; the record; the front waiter's `.wait` probed; the hand-off
 *            commit (its `.wait` renamed to the next `.live`, the record, ours removed) or a
 *            tombstone; the queue written; the lock let go; our `.live` closed (waking the front).
 */
async function contendedCycle() {
  let held; // { token, fd }
  let place; // { ticket, fd } while in line
  while (held === undefined) {
    const lfd = await waitTransition(lockPath, io);
    let queue = place === undefined ? queueOf(lfd) : undefined;
    const text = queue?.length > 0 ? undefined : io.readRecord(recordPath);
    queue ??= queueOf(lfd);
    const owner = ownerOf(text);
    const token = tokenOf(text);
    if (place === undefined) {
      if (queue.length === 0 && (owner === '' || !io.probeLive(livePath(token)))) {
        const { liveFd } = await io.commit(dir, {
          record: recordPath,
          data: recordOf(me, token + 1n),
          live: livePath(token + 1n),
          remove: owner === '' ? undefined : [livePath(token)],
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
    } else if (owner === me && io.sameFile(place.fd, livePath(token))) {
      io.unlockTransition(lfd); // handed to us meanwhile
      held = { token, fd: place.fd };
      break;
    }
    const at = queue.findIndex((word) => ticketOf(word) === place.ticket);
    if (at <= 0 && owner === '') {
      // Released to nobody while first in (or dropped from) the line: taken, as the Lease does.
      if (at === 0) queue.shift();
      await io.commit(dir, {
        record: recordPath,
        data: recordOf(me, token + 1n),
        live: livePath(token + 1n),
        adoptFrom: waitPath(place.ticket),
      });
      io.writeLockData(lfd, queue.join(' '));
      io.unlockTransition(lfd);
      held = { token: token + 1n, fd: place.fd };
      break;
    }
    const ahead = at > 0 ? waitPath(ticketOf(queue[at - 1])) : livePath(token);
    io.unlockTransition(lfd);
    const handed = await watch(ahead, place, at > 0 ? 'writers' : undefined);
    if (handed !== undefined) held = { token: handed, fd: place.fd };
  }
  const acquired = process.hrtime.bigint();

  const lfd = await waitTransition(lockPath, io);
  const queue = queueOf(lfd);
  const next = tokenOf(io.readRecord(recordPath)) + 1n;
  const ours = livePath(held.token);
  let handedTo;
  while (queue.length > 0 && handedTo === undefined) {
    const [ticket, owner] = queue.shift().split(':');
    if (!io.probeLive(waitPath(ticket))) continue; // gave up: the next one
    handedTo = owner;
    await io.commit(dir, {
      record: recordPath,
      data: recordOf(owner, next),
      live: livePath(next),
      adoptFrom: waitPath(ticket),
      remove: [ours],
    });
  }
  if (handedTo === undefined) await io.commit(dir, { record: recordPath, data: recordOf('', next), remove: [ours] });
  io.writeLockData(lfd, queue.join(' '));
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
