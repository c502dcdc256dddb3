// Multi-process figures with real child processes:
//
// crash takeover (bench/agents/agent.mjs, driven by this process) — a holder process holds the
//   lock; a waiter process is already waiting for it (flocklease: acquire with waitMs;
//   proper-lockfile: retries polling every pollMs, stale at its minimum, 2000 ms; lockfile: wait +
//   pollPeriod, stale 2000 ms); the parent SIGKILLs the holder and the figure is kill → the
//   waiter's acquire resolved (shared monotonic clock).
//   The holder is killed a random 100–1100 ms after it took the lock: the peers' takeover depends
//   on that phase (proper-lockfile refreshes its lock's mtime every stale/2 = 1 s; lockfile's
//   staleness counts from when the lock was taken), flocklease's does not.
//
// wake-up (bench/agents/turns.mjs) — two processes take turns with the lock by themselves, as the
//   C and Node floors' hand-offs do (bench/lib/c-floor.mjs): no parent wakes anyone meanwhile. The
//   figure is the hand-off: one let go → the other's acquire resolved (and, alongside, from the
//   release call). For the Lease "let go" is just before the close of its `.live` file that wakes
//   the waiter, the point the floors' hand-offs are timed from too. Not the release resolving: the
//   waking close goes on after the lock is dropped (on ext4 the last close of the unlinked old
//   `.live` frees its inode, ~0.5 ms), and on 2 vCPUs the woken waiter may run on the releaser's
//   CPU first, so a stamp taken after it can wait for the waiter's whole path. The peers, which
//   have no such close, are timed from their release call.
import { mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Agent } from '../lib/agent.mjs';
import { nodeJson } from '../lib/child.mjs';
import { floorHolder, floorWatcher, handOffsOf } from '../lib/c-floor.mjs';
import { DEFAULT_POLL_MS, PROPER_LOCKFILE_MIN_STALE_MS } from '../lib/impls.mjs';
import { round, sharedNow, sleep, summarize } from '../lib/stats.mjs';

/** What the waiter and the holder are opened with, per implementation. */
function agentOptions(key, dir) {
  const base = { op: 'open', impl: key, dir: join(dir, `mp-${key}`) };
  if (key === 'lease') return base;
  return { ...base, pollMs: DEFAULT_POLL_MS, staleMs: PROPER_LOCKFILE_MIN_STALE_MS };
}

export function peerSettings() {
  return {
    pollMs: DEFAULT_POLL_MS,
    staleMs: PROPER_LOCKFILE_MIN_STALE_MS,
    properLockfile: `stale ${PROPER_LOCKFILE_MIN_STALE_MS} ms (its minimum; update every stale/2), retries: poll every ${DEFAULT_POLL_MS} ms`,
    lockfile: `stale ${PROPER_LOCKFILE_MIN_STALE_MS} ms, wait + pollPeriod ${DEFAULT_POLL_MS} ms`,
  };
}

/**
 * The kernel's floor for noticing a crash: a tiny C process holds a flock, another blocks in
 * flock on the same file; SIGKILL the holder → the waiter has the lock (ms samples).
 */
export async function crashFloor({ dir, samples }) {
  mkdirSync(dir, { recursive: true });
  const file = join(dir, 'floor-crash.live');
  const times = [];
  for (let s = 0; s < samples; s++) {
    const holder = await floorHolder(file);
    const watcher = await floorWatcher(file);
    await sleep(30 + Math.random() * 20);
    const killedAt = sharedNow();
    const exited = holder.kill();
    times.push((await watcher.unlocked()) - killedAt);
    await exited;
  }
  return { ...summarize(times), samples: times.map((t) => round(t)) };
}

/**
 * Crash-takeover samples (ms) for some implementations on one directory, their samples
 * interleaved (the order alternating), each with its own waiting process for all its samples. For
 * the Lease and its Node floor, a C watcher also blocks in flock on the holder's .live file, which
 * splits each takeover into the kernel's part (kill → the dead Node process's flock released:
 * `kernelUnlock`) and the rest (→ acquired: `afterUnlock`). Returns { key: result }.
 */
export async function crashTakeover({ keys, dir, samples, log }) {
  const sides = [];
  try {
    for (const key of keys) {
      const options = agentOptions(key, dir);
      mkdirSync(options.dir, { recursive: true });
      const waiter = await Agent.start();
      sides.push({ key, options, waiter, times: [], unlocked: [] });
      await waiter.call({ ...options, wait: true });
    }
    for (let s = 0; s < samples; s++) {
      for (const side of s % 2 === 0 ? sides : [...sides].reverse()) {
        const at = await crashOnce(side);
        log?.(`  crash takeover ${side.key} ${s + 1}/${samples}: ${round(at)} ms`);
      }
    }
  } finally {
    await Promise.all(sides.map((side) => side.waiter.stop()));
  }
  const out = {};
  for (const { key, times, unlocked } of sides) {
    out[key] = { ...summarize(times), samples: times.map((t) => round(t)) };
    if (unlocked.length > 0) {
      out[key].kernelUnlock = summarize(unlocked);
      out[key].afterUnlock = summarize(times.map((t, i) => t - unlocked[i]));
    }
  }
  return out;
}

/** The implementations whose holder keeps a `.live` file, so a C watcher can split their takeovers. */
const SPLIT = new Set(['lease', 'node-floor-takeover']);

/** One takeover: a fresh holder takes the lock, the side's waiter waits for it, the holder is killed. */
async function crashOnce({ key, options, waiter, times, unlocked }) {
  const holder = await Agent.start();
  await holder.call({ ...options, wait: false });
  await holder.call({ op: 'lock', id: 'crash' });
  const heldAt = sharedNow();
  let watcher;
  if (SPLIT.has(key)) {
    const live = readdirSync(options.dir).filter((name) => name.endsWith('.live'));
    if (live.length !== 1) throw new Error(`expected the holder's one .live file, found ${live.join(', ')}`);
    watcher = await floorWatcher(join(options.dir, live[0]));
  }
  await waiter.startLock('crash');
  // Let the waiter settle into its wait, then kill at a random phase (see the header).
  const killAfter = watcher ? 30 + Math.random() * 20 : 100 + Math.random() * 1000;
  await sleep(Math.max(0, heldAt + killAfter - sharedNow()));
  const killedAt = sharedNow();
  const exited = holder.kill('SIGKILL');
  const { at } = await waiter.lockResult(30_000);
  times.push(at - killedAt);
  if (watcher) unlocked.push((await watcher.unlocked()) - killedAt);
  await exited;
  await waiter.call({ op: 'release' });
  return at - killedAt;
}

/** How long each side of a hand-off figure holds the lock, and idles after letting it go: the
 * Lease's, its peers' and the floors' (bench/run.mjs). */
export const WAKE_HOLD_MS = 40;
export const WAKE_QUIET_MS = 20;
const TURNS = fileURLToPath(new URL('../agents/turns.mjs', import.meta.url));

/** The cycles each of two processes taking turns makes for `samples` hand-offs (and one more). */
export const turnCycles = (samples) => Math.ceil(samples / 2) + 1;

/** How many pairs of processes a hand-off figure starts at most to gather its samples. */
const MAX_PAIRS = 8;

/**
 * Hand-off samples from pairs of processes taking turns: `pairOf(pair, wanted)` runs one pair for
 * `wanted` hand-offs and returns them in order (`letGo`, and `call` from the release call when it
 * has them). Each pair's first `warmup` are kept apart (`first`). A releaser that takes its lock
 * back before the waiter wakes (a polling peer, or any side on a loaded machine) makes no
 * hand-off, so further pairs run, up to MAX_PAIRS, until there are `samples` after the warm-ups.
 */
export async function gatherHandOffs({ samples, warmup, pairOf }) {
  const out = { fromLetGo: [], fromCall: [], first: [] };
  for (let pair = 0; pair < MAX_PAIRS && out.fromLetGo.length < samples; pair++) {
    const { letGo, call = [] } = await pairOf(pair, warmup + samples - out.fromLetGo.length);
    out.first.push(...letGo.slice(0, warmup));
    out.fromLetGo.push(...letGo.slice(warmup));
    out.fromCall.push(...call.slice(warmup));
  }
  return out;
}

/**
 * Wake-up samples (ms) for one implementation on one directory: two processes taking turns
 * (bench/agents/turns.mjs, holding WAKE_HOLD_MS and idling after each release), driven as the
 * floors' hand-offs are (bench/lib/c-floor.mjs), gathered by `gatherHandOffs`. `fromLetGo`: each
 * hand-off, in the order they happened; `fromCall`: the same from the release call.
 */
export async function wakeUp({ key, dir, samples, warmup, log }) {
  // A polling peer's waiter takes the lock up to a poll period after it is let go: its releaser
  // idles longer, or would mostly take the lock back itself (no hand-off).
  const quietMs = key === 'lease' ? WAKE_QUIET_MS : WAKE_QUIET_MS + 2 * DEFAULT_POLL_MS;
  const out = await gatherHandOffs({
    samples,
    warmup,
    pairOf: async (pair, wanted) => {
      const where = join(dir, `turns-${key}-${pair}`);
      mkdirSync(where, { recursive: true });
      const args = [TURNS, key, where, turnCycles(wanted), WAKE_HOLD_MS, quietMs].map(String);
      const runs = await Promise.all([nodeJson(args), nodeJson(args)]);
      const call = runs.map(({ acquiredNs, releaseCalledNs }) => ({ acquiredNs, releasedNs: releaseCalledNs }));
      return { letGo: handOffsOf(runs, `wake-up ${key}`), call: handOffsOf(call, `wake-up ${key}`) };
    },
  });
  log?.(`  wake-up ${key}: ${out.fromLetGo.length} samples`);
  return out;
}
