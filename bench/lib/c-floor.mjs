// The C floor (bench/c-floor.c): built here with the system compiler, run as a child process. Its
// latencies are taken inside the C program (clock_gettime around each cycle), so process start-up
// is not in them.
import { execFile, execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { mkdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const source = join(root, 'bench', 'c-floor.c');
export const FLOOR_BIN = join(root, 'bench', 'out', 'c-floor');
const CFLAGS = ['-O2', '-Wall', '-Wextra'];
/**
 * The Node processes that take c-floor.c's command line and print its output, by runtime: 'node',
 * the Node floor's fair hand-off; 'protocol', the protocol floor (the Lease's contended calls).
 */
const NODE_AGENTS = {
  node: join(root, 'bench', 'agents', 'node-floor-handoff.mjs'),
  protocol: join(root, 'bench', 'agents', 'protocol-floor.mjs'),
};

/** Builds bench/out/c-floor from bench/c-floor.c (if it is older than the source). */
export function buildFloor() {
  let fresh = false;
  try {
    fresh = statSync(FLOOR_BIN).mtimeMs >= statSync(source).mtimeMs;
  } catch {
    // not built yet
  }
  if (!fresh) {
    mkdirSync(dirname(FLOOR_BIN), { recursive: true });
    execFileSync(process.env.CC || 'cc', [...CFLAGS, '-o', FLOOR_BIN, source], { stdio: 'inherit' });
  }
  const compiler = execFileSync(process.env.CC || 'cc', ['--version'], { encoding: 'utf8' }).split('\n')[0];
  return { binary: FLOOR_BIN, compiler, flags: CFLAGS.join(' ') };
}

/** Runs the C floor, or (runtime 'node' or 'protocol') a Node agent, with `args`: its JSON output. */
function run(args, runtime = 'c', timeoutMs = 600_000) {
  mkdirSync(args[0], { recursive: true });
  const [file, argv] = runtime === 'c' ? [FLOOR_BIN, args] : [process.execPath, [NODE_AGENTS[runtime], ...args]];
  return new Promise((resolve, reject) => {
    execFile(file, argv, { maxBuffer: 256 * 1024 * 1024, timeout: timeoutMs }, (error, stdout, stderr) => {
      if (error) reject(Object.assign(error, { stderr }));
      else resolve(JSON.parse(stdout));
    });
  });
}

/** `cycles` acquire+release cycles over `ids` ids (after `warmup` unmeasured ones): latencies in µs. */
export async function floorCycles(dir, { cycles, warmup, durable, ids = 4 }) {
  const { ns } = await run([dir, String(cycles + warmup), durable ? '1' : '0', String(ids)]);
  return ns.slice(warmup).map((x) => x / 1000);
}

/** `renews` renews of one held lease (after `warmup` unmeasured ones): latencies in µs. */
export async function floorRenews(dir, { renews, warmup, durable }) {
  const { ns } = await run([dir, '--renew', String(renews + warmup), durable ? '1' : '0']);
  return ns.slice(warmup).map((x) => x / 1000);
}

/** One contending process: { waitsMs, cycles } of the cycles that started after the warm-up. */
export async function floorContender(dir, { seconds, warmupSeconds, durable, fair = false, runtime = 'c' }) {
  const { waitsNs, cycles } = await run(
    [dir, fair ? '--contend-fair' : '--contend', String(seconds), durable ? '1' : '0', String(warmupSeconds)],
    runtime,
  );
  return { waitsMs: waitsNs.map((x) => x / 1e6), cycles };
}

/**
 * The C hand-off: two processes taking turns first come first served, each holding the lease
 * `holdMs` before releasing (so the other is asleep in the kernel when it is woken, as a waiting
 * Lease is). As in the lease, the release commits the record naming the next in line and the
 * woken acquirer only reads it. Each sample is one process letting go → the other's acquire done,
 * in ms, in the order they happened (a caller can set the first ones apart as warm-up).
 * `runtime: 'node'`: the same two processes in Node (bench/agents/node-floor-handoff.mjs).
 */
export async function floorHandOffs(dir, { cycles, durable, holdMs, quietMs = 0, runtime = 'c' }) {
  const args = [dir, '--handoff', String(cycles), durable ? '1' : '0', String(holdMs), String(quietMs)];
  return handOffsOf(await Promise.all([run(args, runtime), run(args, runtime)]), `${runtime} floor`);
}

/**
 * The hand-offs of two processes taking turns, from each one's `acquiredNs` and `releasedNs`:
 * ms from one letting go to the other's acquire done, in the order they happened.
 */
export function handOffsOf(runs, label) {
  // An acquisition is a hand-off when the other process held the lease since this one last did;
  // it starts when that hold let go (timed just before the waking close), so it is never negative.
  const handOffs = []; // [acquired at, hand-off ms]
  const lastBefore = (times, t) => times.findLastIndex((x) => x < t);
  for (const [who, mine] of runs.entries()) {
    const other = runs[1 - who];
    for (const t of mine.acquiredNs) {
      const held = lastBefore(other.acquiredNs, t);
      const own = lastBefore(mine.acquiredNs, t);
      if (held >= 0 && (own < 0 || other.acquiredNs[held] > mine.acquiredNs[own])) {
        const handOff = (t - other.releasedNs[held]) / 1e6;
        if (!(handOff > 0)) throw new Error(`${label}: a hand-off of ${handOff} ms`);
        handOffs.push([t, handOff]);
      }
    }
  }
  return handOffs.sort((a, b) => (a[0] < b[0] ? -1 : 1)).map(([, handOff]) => handOff);
}

function lineReader(child) {
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  return async () => {
    const { value, done } = await lines.next();
    if (done) throw new Error('floor process ended early');
    return value;
  };
}

/** A C process holding an exclusive flock on `file` until killed: { kill() → exited }. */
export async function floorHolder(file) {
  const child = spawn(FLOOR_BIN, [file, '--hold'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = once(child, 'exit');
  const line = await lineReader(child)();
  if (line !== 'held') throw new Error(`floor --hold: ${line}`);
  return { kill: () => (child.kill('SIGKILL'), exited) };
}

/**
 * A C process blocked in flock(LOCK_SH) on `file` (once this resolves); `unlocked()` resolves to
 * when the kernel let it have the lock (CLOCK_MONOTONIC ms, as sharedNow()). Call it after the
 * measured moment: until then the process keeps quiet (it answers and exits once asked).
 */
export async function floorWatcher(file) {
  const child = spawn(FLOOR_BIN, [file, '--wait-unlock'], { stdio: ['pipe', 'pipe', 'inherit'] });
  const next = lineReader(child);
  const line = await next();
  if (line !== 'waiting') throw new Error(`floor --wait-unlock: ${line}`);
  return {
    unlocked: () => {
      child.stdin.end();
      return next().then((l) => JSON.parse(l).unlockedNs / 1e6);
    },
  };
}
