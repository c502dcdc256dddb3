// The Node floor of the lease's operations: c-floor.c's cycle() made through the lease's own I/O
// layer (fileIO: the addon's calls), in the benchmark's process, with none of the Lease's logic (no
// gate, no record codec, no grants, no turn guard). What any Node lease built on those calls pays:
// the runtime, the addon's crossings, and the commit off the event loop on disk (libuv's pool) or
// inline on tmpfs, as the Lease does it. The cycle figure runs it beside the Lease
// (bench/figures/latency.mjs), and so does the event-loop figure (bench/figures/eld.mjs), there
// with the Lease's turn split (src/port/turn.ts).
import { mkdirSync } from 'node:fs';
import { setImmediate as turn } from 'node:timers/promises';
import { fileIO } from '../../dist/flock/io.js';
import { lockTransition } from '../../dist/flock/transition.js';
import { whenUnlocked } from '../../dist/flock/watch.js';

/** A record as the lease writes it (a fixed expiry: the floors decode nothing). */
const recordText = (id, owner, token) =>
  `{"owner":"${owner}","token":${token},"expiry":"2026-11-29T10:00:00.000Z","session":"${id}"}`;

/**
 * `lock(id)` → `release()`: IMPLS['node-floor'] (bench/lib/impls.mjs). `io`: the I/O layer (the
 * event-loop figure's marks every call). `splitTurn`: let the loop turn once before each commit,
 * as the Lease does for an operation that begins a run.
 */
export function nodeFloor(dir, { io = fileIO, splitTurn = false } = {}) {
  mkdirSync(dir, { recursive: true });
  io.prepareDir(dir); // decides, as the Lease does, whether commits run inline (tmpfs) or off the loop
  const tokens = new Map();
  const lockTransition = (path) => {
    const fd = io.tryLockTransition(path);
    if (typeof fd !== 'number') throw new Error(`node floor: ${path} is ${fd}`);
    return fd;
  };
  /** One transition: lock, read the record, look at the wait queue, commit, unlock. */
  async function transition(id, plan) {
    const lfd = lockTransition(`${dir}/${id}.lock`);
    io.readRecord(`${dir}/${id}.lease.json`);
    io.readLockData(lfd);
    if (splitTurn) await turn();
    const result = await io.commit(dir, { record: `${dir}/${id}.lease.json`, ...plan });
    io.unlockTransition(lfd);
    return result;
  }
  return {
    async lock(id) {
      const token = (tokens.get(id) ?? 0) + 1;
      tokens.set(id, token);
      const live = `${dir}/${id}.${token}.live`;
      const { liveFd } = await transition(id, {
        data: recordText(id, 'floor', token),
        live,
        remove: [`${dir}/${id}.${token - 1}.live`],
      });
      return async () => {
        await transition(id, { data: recordText(id, '', token), remove: [live] });
        io.closeFile(liveFd);
      };
    },
  };
}

// A wait that never ends early: whenUnlocked's round only stops a polling fallback.
const forever = { over: false };

/** Resolves once nobody holds `path` exclusively, woken by the lease's own watch (`mode`: as the
 * Lease watches that kind of file, see WatchMode). */
export function unlocked(path, io = fileIO, mode = undefined) {
  return new Promise((resolve) => {
    if (!whenUnlocked(io, path, forever, resolve, mode)) resolve();
  });
}

/** A transition lock, waited for as the Lease waits: its own lockTransition (try, yield, then the
 * cue-only watch of its holder letting go, looked at again on a short timer). */
export function waitTransition(path, io = fileIO) {
  return lockTransition({ io, path, sessionId: path, deadline: Infinity });
}

/**
 * The Node floor of a crash takeover: what any Node lease built on the addon pays to notice that a
 * holder died and take its place. `lock(id)` takes the id's transition lock, reads the record (its
 * token by one regular expression, no decoding), and probes the holder's `.live`; held, it waits
 * (with `wait`) on the lease's watch of that file, then looks again; free, it commits the next
 * generation durably, as a takeover does (new `.live`, record, the old `.live` removed). No queue,
 * gate, grant or clock: the crash-takeover figure runs it beside the Lease
 * (bench/figures/takeover.mjs).
 */
export function nodeFloorTakeover(dir, { wait = false, io = fileIO } = {}) {
  mkdirSync(dir, { recursive: true });
  io.prepareDir(dir);
  return {
    async lock(id) {
      const lockPath = `${dir}/${id}.lock`;
      const record = `${dir}/${id}.lease.json`;
      for (;;) {
        const lfd = await waitTransition(lockPath, io);
        const text = io.readRecord(record);
        io.readLockData(lfd);
        const [, owner = '', token = '0'] = /"owner":"([^"]*)","token":(\d+)/.exec(text ?? '') ?? [];
        const live = `${dir}/${id}.${token}.live`;
        if (owner !== '' && io.probeLive(live)) {
          io.unlockTransition(lfd);
          if (!wait) throw new Error(`node floor: ${id} is held`);
          await unlocked(live, io);
          continue;
        }
        const next = BigInt(token) + 1n;
        const mine = `${dir}/${id}.${next}.live`;
        const remove = text === undefined ? [] : [live];
        const { liveFd } = await io.commit(dir, {
          record,
          data: recordText(id, `p${process.pid}`, next),
          live: mine,
          remove,
        });
        io.unlockTransition(lfd);
        return async () => {
          const fd = await waitTransition(lockPath, io);
          await io.commit(dir, { record, data: recordText(id, '', next), remove: [mine] });
          io.closeFile(liveFd);
          io.unlockTransition(fd);
        };
      }
    },
  };
}
