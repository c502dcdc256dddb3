// Evidence for docs/bench.md ("The fifteenth round"): are T6 and T8 within a Node process's reach
// for the Lease's own protocol? The benchmark's Node floor makes the fewest calls a fair hand-off
// needs. This script adds a third floor, the *protocol floor*: Node processes making, through the
// Lease's addon calls (fileIO) and its watch, every system call a contended Lease cycle makes, in
// the same order, with none of its JavaScript logic (no gate, no record or queue codec, no clock,
// no grants, no diagnostics). Per cycle, as the Lease does it (see Lease.release and #attempt):
//   acquire: the transition lock (open, flock, inode re-check); a first try reads the queue, and
//            the record only if nobody is in line (a later try: the record, then the queue);
//            free and nobody in line: commit a new generation; else the waiter's own `.wait`
//            created and flocked, the queue written, the lock let go, and a watch with the Lease's
//            hand-off probe on the one ahead (its `.wait`, writers' closes) or the holder (its
//            `.live`, every close); a report without a hand-off looks again under the lock;
//   release: the lock; the queue read; the record read; the front waiter's `.wait` probed; the
//            hand-off commit (its `.wait` renamed to the next `.live`, the record, ours removed);
//            the queue written; the lock let go; our `.live` closed (which wakes the front waiter).
// The queue is a line of `ticket:owner` words; the token is found by indexOf; a busy transition
// lock is waited for as the Lease waits (bench/lib/node-floor.mjs, waitTransition). Rounds of the
// Lease, this floor, the fair Node floor and the fair C floor interleave, their order rotating,
// after the same warm-up: the contention figure's own rounds (bench/figures/contention.mjs).
//
// `handoff` runs the wake-up figure's hand-off the same way (T8): two processes taking turns, each
// holding the lock and idling after it lets go as the figure's do; the Lease's side is its own wakeUp.
//
//   node bench/evidence/protocol-floor.mjs contention [dir=/dev/shm] [rounds=4] [seconds=4] [warm-up s=1] [processes=8]
//   node bench/evidence/protocol-floor.mjs handoff [dir] [rounds=4]
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const args = process.argv.slice(2);

if (args[0] === '--child') {
  const [, dir, mode, ...counts] = args;
  const { fileIO: io } = await import('../../dist/flock/io.js');
  const { whenUnlocked } = await import('../../dist/flock/watch.js');
  const { recordLayout } = await import('../../dist/flock/record.js');
  const { waitTransition } = await import('../lib/node-floor.mjs');
  const id = 'contended';
  const lockPath = `${dir}/${id}.lock`;
  const recordPath = `${dir}/${id}.lease.json`;
  const livePath = (token) => `${dir}/${id}.${token}.live`;
  const waitPath = (ticket) => `${dir}/${id}.${ticket}.wait`;
  const EXPIRY = '2099-01-01T00:00:00.000Z'; // the floor decodes no expiry
  const me = `p${process.pid}`;
  const layouts = new Map();
  const recordOf = (owner, token) => {
    let l = layouts.get(owner);
    if (l === undefined) layouts.set(owner, (l = recordLayout(owner, id)));
    return `${l.before}${token}${l.between}${EXPIRY}${l.after}`;
  };
  const mine = recordLayout(me, id);
  const tokenOf = (text) => {
    const at = text === undefined ? -1 : text.indexOf('"token":');
    return at < 0 ? 0n : BigInt(text.slice(at + 8, text.indexOf(',', at)));
  };
  const ownerOf = (text) => (text === undefined ? '' : text.slice(10, text.indexOf('"', 10)));
  const lockTransition = () => waitTransition(lockPath, io);
  /** The queue under the transition lock `lfd`: its `ticket:owner` words. */
  const queueOf = (lfd) => (io.readLockData(lfd) ?? '').split(' ').filter(Boolean);
  io.prepareDir(dir);
  const keepAlive = setInterval(() => {}, 1 << 30);

  let held; // { token, fd }
  let place; // { ticket, fd } while in line

  /** The watch of `path` with the Lease's hand-off probe: the token of a hand-off to us, or undefined. */
  const watch = (path, mode) =>
    new Promise((resolve) => {
      const probe = { record: recordPath, fd: place.fd, livePrefix: `${dir}/${id}.`, liveSuffix: '.live', ...mine };
      const started = whenUnlocked(io, path, { over: false }, (token) => resolve(token ?? undefined), probe, mode);
      if (!started) resolve(undefined);
    });

  async function acquire() {
    for (;;) {
      const lfd = await lockTransition();
      // As the Lease: a first try reads the queue first, and joins anyone in line without the record.
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
          return;
        }
        const last = queue.length === 0 ? 0 : Number(queue.at(-1).split(':')[0]);
        const ticket = Math.max(last + 1, Math.floor((performance.timeOrigin + performance.now()) * 1000));
        const fd = io.lockFile(waitPath(ticket));
        place = { ticket, fd };
        queue.push(`${ticket}:${me}`);
        io.writeLockData(lfd, queue.join(' '));
      } else if (owner === me && io.sameFile(place.fd, livePath(token))) {
        io.unlockTransition(lfd); // handed to us meanwhile
        held = { token, fd: place.fd };
        place = undefined;
        return;
      }
      const at = queue.findIndex((w) => w.startsWith(`${place.ticket}:`));
      if (at <= 0 && owner === '') {
        // Released to nobody while we were first (or dropped from) the line: take it, as the Lease does.
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
        place = undefined;
        return;
      }
      const ahead = at > 0 ? waitPath(queue[at - 1].split(':')[0]) : livePath(token);
      io.unlockTransition(lfd);
      const handed = await watch(ahead, at > 0 ? 'writers' : undefined);
      if (handed !== undefined) {
        held = { token: handed, fd: place.fd };
        place = undefined;
        return;
      }
    }
  }

  async function release() {
    const lfd = await lockTransition();
    const queue = queueOf(lfd); // first, as the Lease's one step
    const text = io.readRecord(recordPath);
    const next = tokenOf(text) + 1n;
    const ours = livePath(held.token);
    let handedTo;
    while (queue.length > 0 && handedTo === undefined) {
      const [ticket, owner] = queue.shift().split(':');
      if (!io.probeLive(waitPath(ticket))) continue; // gone: the next one
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
    const released = process.hrtime.bigint(); // as it lets go: see floor.c's fair_cycle
    io.closeFile(held.fd);
    held = undefined;
    return released;
  }

  if (mode === 'contend') {
    const [warmupSeconds, seconds] = counts.map(Number);
    const start = process.hrtime.bigint();
    const warm = start + BigInt(warmupSeconds * 1e9);
    const until = warm + BigInt(seconds * 1e9);
    let cycles = 0;
    for (let at = start; at < until; at = process.hrtime.bigint()) {
      await acquire();
      await release();
      if (at >= warm) cycles++;
    }
    process.stdout.write(`${JSON.stringify({ cycles })}\n`);
  } else {
    // 'handoff': bench/lib/floor.mjs's floorHandOffs protocol (two of these take turns).
    const [cycles, holdMs, quietMs] = counts.map(Number);
    const acquiredNs = [];
    const releasedNs = [];
    for (let i = 0; i < cycles; i++) {
      await acquire();
      acquiredNs.push(process.hrtime.bigint());
      await new Promise((resolve) => setTimeout(resolve, holdMs));
      releasedNs.push(await release());
      await new Promise((resolve) => setTimeout(resolve, quietMs));
    }
    process.stdout.write(
      `${JSON.stringify({ acquiredNs: acquiredNs.map(Number), releasedNs: releasedNs.map(Number) })}\n`,
    );
  }
  clearInterval(keepAlive);
  process.exit(0);
}

const [figure, base = '/dev/shm', roundsArg = '4', secondsArg = '4', warmupArg = '1', processesArg = '8'] = args;
if (figure !== 'contention' && figure !== 'handoff') {
  process.stderr.write(
    `usage: node ${process.argv[1]} contention|handoff [dir] [rounds] [seconds] [warm-up s] [processes]\n`,
  );
  process.exit(64);
}
const { floorHandOffs, handOffsOf, buildFloor } = await import('../lib/floor.mjs');
const { median } = await import('../lib/stats.mjs');
const { nodeJson } = await import('../lib/child.mjs');
const { turnCycles, wakeUp, WAKE_HOLD_MS, WAKE_QUIET_MS } = await import('../figures/takeover.mjs');
const { nodeRound, floorRound } = await import('../figures/contention.mjs');
const { rotate } = await import('../figures/latency.mjs');
buildFloor();
const rounds = Number(roundsArg);
const seconds = Number(secondsArg);
const warmup = Number(warmupArg);
const processes = Number(processesArg);

/** A protocol floor process: its one line of JSON. */
const protocolFloor = (dir, ...rest) => nodeJson([fileURLToPath(import.meta.url), '--child', dir, ...rest.map(String)]);

/** The contention figure's loop (bench/figures/contention.mjs): cycles/s of each side in a round. */
const window = { processes, warmupMs: warmup * 1000, durationMs: seconds * 1000 };
const contention = {
  lease: async (dir) => (await nodeRound('lease', dir, { ...window, pollMs: 0 })).cycles / seconds,
  async 'protocol floor'(dir) {
    const rs = await Promise.all(
      Array.from({ length: processes }, () => protocolFloor(dir, 'contend', warmup, seconds)),
    );
    return rs.reduce((n, r) => n + r.cycles, 0) / seconds;
  },
  'node floor': async (dir) => (await floorRound(dir, { ...window, fair: true, runtime: 'node' })).cycles / seconds,
  'C floor': async (dir) => (await floorRound(dir, { ...window, fair: true, runtime: 'c' })).cycles / seconds,
};

/** The wake-up figure's hand-off (bench/run.mjs, 'wake'): p50 ms of each side's hand-offs in a
 * round, its first WAKE_WARMUP set apart. */
const WAKE_WARMUP = 8;
const WAKE_SAMPLES = 16;
const floorCycles = turnCycles(WAKE_WARMUP + WAKE_SAMPLES);
const handOffSettings = { cycles: floorCycles, durable: true, holdMs: WAKE_HOLD_MS, quietMs: WAKE_QUIET_MS };
const handoff = {
  async lease(dir) {
    const { fromLetGo } = await wakeUp({ key: 'lease', dir, samples: WAKE_WARMUP + WAKE_SAMPLES });
    return fromLetGo.slice(WAKE_WARMUP);
  },
  async 'protocol floor'(dir) {
    const { cycles, holdMs, quietMs } = handOffSettings;
    const pair = [
      protocolFloor(dir, 'handoff', cycles, holdMs, quietMs),
      protocolFloor(dir, 'handoff', cycles, holdMs, quietMs),
    ];
    return handOffsOf(await Promise.all(pair), 'protocol floor').slice(WAKE_WARMUP);
  },
  async 'node floor'(dir) {
    return (await floorHandOffs(dir, { ...handOffSettings, runtime: 'node' })).slice(WAKE_WARMUP);
  },
  async 'C floor'(dir) {
    return (await floorHandOffs(dir, { ...handOffSettings, runtime: 'c' })).slice(WAKE_WARMUP);
  },
};

const sides = figure === 'contention' ? contention : handoff;
const names = Object.keys(sides);
const results = Object.fromEntries(names.map((k) => [k, []]));
const root = mkdtempSync(join(base, 'protocol-floor-'));
try {
  for (let r = 0; r < rounds; r++) {
    const line = [];
    for (const name of rotate(names, r)) {
      const dir = join(root, `${r}-${name.replaceAll(' ', '-')}`);
      mkdirSync(dir, { recursive: true });
      const result = await sides[name](dir);
      if (figure === 'contention') results[name].push(result);
      else results[name].push(...result);
      line.push(
        `${name} ${figure === 'contention' ? `${Math.round(result)}/s` : `p50 ${median(result).toFixed(3)} ms`}`,
      );
    }
    console.log(`round ${r + 1}: ${line.join(', ')}`);
  }
} finally {
  rmSync(root, { recursive: true, force: true });
}
const c = median(results['C floor']);
for (const name of names) {
  const m = median(results[name]);
  console.log(
    figure === 'contention'
      ? `${name.padEnd(15)} median ${Math.round(m)}/s = ${((100 * m) / c).toFixed(1)} % of the fair C floor`
      : `${name.padEnd(15)} p50 ${m.toFixed(4)} ms (n=${results[name].length}) = ${(m / c).toFixed(2)}× the C hand-off`,
  );
}
