#!/usr/bin/env node
// flocklease benchmark harness: `npm run bench` (full, minutes) or `npm run bench:quick` (seconds).
//
//   node bench/run.mjs [--quick] [--busy] [--out DIR] [--disk DIR] [--tmpfs DIR] [--only a,b,…] [--wait-quiet LOAD] [--pin MODE]
//
// Measures, on a disk directory and on tmpfs, flocklease's Lease and MemoryLease beside
// proper-lockfile, lockfile and the C floor (bench/c-floor.c): acquire+release cycle, renew,
// event-loop delay, crash takeover, wake-up after release, contention (8 processes) and scale
// (10 000 held ids). Prints a markdown table; writes results.json, results.md and chart.svg to the
// output directory (full run: bench/; busy: bench/busy/; quick: bench/out/, which git ignores). Imports the BUILT
// package (dist/): `npm run build` first (the npm scripts do). See docs/bench.md.
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { contentionFigure } from './figures/contention.mjs';
import { eldFigure } from './figures/eld.mjs';
import { cycleFigure, renewFigure, rotate } from './figures/latency.mjs';
import { scaleFigure } from './figures/scale.mjs';
import {
  crashFloor,
  crashTakeover,
  gatherHandOffs,
  peerSettings,
  turnCycles,
  WAKE_HOLD_MS,
  WAKE_QUIET_MS,
  wakeUp,
} from './figures/takeover.mjs';
import { chartSvg } from './lib/chart.mjs';
import { buildFloor, floorHandOffs } from './lib/c-floor.mjs';
import { CROSS_PROCESS_IMPLS } from './lib/impls.mjs';
import { loadAverage, machineInfo, mainThreadPinning } from './lib/machine.mjs';
import { markdown, targets } from './lib/report.mjs';
import { summarize } from './lib/stats.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const FIGURES = ['cycle', 'renew', 'eventLoop', 'scale', 'crash', 'wake', 'contention'];

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    busy: { type: 'boolean', default: false },
    out: { type: 'string' },
    disk: { type: 'string', default: os.tmpdir() },
    tmpfs: { type: 'string', default: '/dev/shm' },
    only: { type: 'string' },
    'wait-quiet': { type: 'string' },
    pin: { type: 'string', default: 'main' },
    help: { type: 'boolean', short: 'h', default: false },
  },
});
if (args.help) {
  console.log(`usage: node bench/run.mjs [options]   (npm run bench builds first)

  --quick            seconds, tiny counts, every figure still exercised; writes bench/out/
  --busy             keep every CPU 70 % busy throughout (stress-ng, from Debian) and judge the ratio
                     targets loosened by 20 %; writes bench/busy/ (npm run bench:busy)
  --out DIR          where results.json, results.md and chart.svg go (default: bench/, see above)
  --disk DIR         the disk directory (default: the OS temp dir)
  --tmpfs DIR        the tmpfs directory (default: /dev/shm)
  --only LIST        some of: ${FIGURES.join(',')}
  --wait-quiet LOAD  first wait (up to 20 minutes) for the 1-minute load average to drop below LOAD
  --pin MODE         each cycle and renew round on one vCPU: main (default: the main thread and the C
                     floor), all (every thread of this process), none (no pinning)

example: node bench/run.mjs --only cycle,crash --wait-quiet 0.5`);
  process.exit(0);
}
const quick = args.quick;
const only = args.only ? args.only.split(',') : FIGURES;
if (!['main', 'all', 'none'].includes(args.pin)) throw new Error(`--pin: main, all or none, not ${args.pin}`);
for (const name of only)
  if (!FIGURES.includes(name)) throw new Error(`--only: unknown figure ${name} (one of ${FIGURES.join(', ')})`);
const outDir = resolve(args.out ?? (quick ? join(here, 'out') : args.busy ? join(here, 'busy') : here));

/** Counts per mode. The full run takes ~20 minutes (busy: ~22); the quick one ~35 s on 2 busy cores. */
const config = quick
  ? {
      // The fewest of each that still run every code path and fill every figure: 2 cycle rounds (the
      // pinned rounds alternate CPUs), 4 contenders
      // (a queue of several waiters).
      cycle: { rounds: { disk: 2, tmpfs: 2 }, cycles: { disk: 30, tmpfs: 50 }, warmup: 10 },
      eventLoop: { rounds: 1, windowMs: 50 },
      crash: { samples: { lease: 1, peers: 1 }, peersOn: ['tmpfs'] },
      wake: { rounds: 1, warmup: 2, samples: { lease: 4, peers: 2 } },
      contention: { rounds: 1, processes: 4, warmupMs: 50, durationMs: 250, peerPollMs: 10, peersOn: ['tmpfs'] },
      scale: { ids: 100, iterations: 20, warmup: 5, rounds: { tmpfs: 1, disk: 1 } },
    }
  : {
      // The disk's rounds are short and many: its fsync time drifts within seconds, and each ratio is
      // taken within one round (bench/lib/report.mjs, pairedRatio).
      cycle: { rounds: { disk: 14, tmpfs: 7 }, cycles: { disk: 500, tmpfs: 2000 }, warmup: 200 },
      eventLoop: { rounds: 5, windowMs: 600 },
      crash: { samples: { lease: 40, peers: 12 }, peersOn: ['disk', 'tmpfs'] },
      // Each round's processes are fresh: their first hand-offs run cold code (V8 has not compiled the
      // woken path yet), so `warmup` hand-offs a round on every side are set apart, as the cycle's are.
      wake: { rounds: 6, warmup: 8, samples: { lease: 96, peers: 15 } },
      // 10 s of warm-up: 8 contenders make only ~400 cycles a second each, so V8 takes ~10 s to optimize
      // most of the Lease's code; after 1 s it made two thirds of its warm throughput.
      contention: { rounds: 4, processes: 8, warmupMs: 10_000, durationMs: 4000, peerPollMs: 10, peersOn: ['tmpfs'] },
      scale: { ids: 10_000, iterations: 1000, warmup: 100, rounds: { tmpfs: 5, disk: 5 } },
    };
config.peers = peerSettings();

// --wait-quiet LOAD: on a shared machine, wait (up to 20 minutes) for the 1-minute load average to
// drop below LOAD before starting.
if (args['wait-quiet'] !== undefined) {
  const limit = Number(args['wait-quiet']);
  const until = Date.now() + 20 * 60_000;
  while (os.loadavg()[0] >= limit && Date.now() < until) {
    process.stderr.write(`waiting for a quiet machine: load ${os.loadavg()[0].toFixed(2)} ≥ ${limit}\n`);
    await new Promise((resolve) => setTimeout(resolve, 10_000));
  }
}

// --busy: every CPU kept 70 % busy by stress-ng for the whole run, to emulate a slower, shared
// machine (issue 12); stopped when the run ends, however it ends.
const BUSY_ARGS = ['--cpu', String(os.availableParallelism()), '--cpu-load', '70'];
let stress;
if (args.busy) {
  if (spawnSync('stress-ng', ['--version'], { stdio: 'ignore' }).error)
    throw new Error('--busy needs stress-ng on the PATH (Debian: apt-get install stress-ng)');
  stress = spawn('stress-ng', BUSY_ARGS, { stdio: 'ignore' });
  stress.unref(); // the run ends when its figures do
  const stop = () => stress.kill('SIGINT');
  process.on('exit', stop);
  for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => process.exit(130));
  await new Promise((resolve) => setTimeout(resolve, 3000)); // its workers up to load
}

const started = Date.now();
const log = (line) => process.stderr.write(`[${((Date.now() - started) / 1000).toFixed(1).padStart(6)} s] ${line}\n`);

const roots = { disk: args.disk, tmpfs: args.tmpfs };
const dirs = {};
for (const [fs, root] of Object.entries(roots)) dirs[fs] = mkdtempSync(join(root, 'flocklease-bench-'));
const machine = machineInfo(roots);
const floor = buildFloor();
const pinning = await mainThreadPinning(args.pin);
const results = {
  schema: 1,
  mode: quick ? 'quick' : 'full',
  busy: stress ? { command: `stress-ng ${BUSY_ARGS.join(' ')}` } : null,
  startedAt: new Date(started).toISOString(),
  machine,
  load: { start: loadAverage(), figures: {} },
  config: {
    ...config,
    floor,
    pinnedRounds: pinning ? { mode: pinning.mode, cpus: pinning.cpus, figures: ['cycle', 'renew'] } : null,
    dirs: roots,
    units: 'cycle/renew/scale latency: µs; everything else: ms unless the field name says otherwise',
  },
  figures: {},
  errors: [],
};
log(
  `${results.mode} run · ${machine.cpu} · ${machine.cores} cores · load ${results.load.start.join(' ')} · disk ${roots.disk} (${machine.dirs.disk.fsType}), tmpfs ${roots.tmpfs} (${machine.dirs.tmpfs.fsType})`,
);

async function figure(name, fn) {
  if (!only.includes(name)) return;
  log(`${name}…`);
  const before = loadAverage();
  try {
    results.figures[name] = await fn();
  } catch (error) {
    log(`${name} FAILED: ${error.stack ?? error}${error.stderr ? `\n${error.stderr}` : ''}`);
    results.errors.push({ figure: name, error: String(error.message ?? error) });
  }
  results.load.figures[name] = { before, after: loadAverage() };
}

async function perFs(fn) {
  const out = {};
  for (const fs of ['disk', 'tmpfs']) out[fs] = await fn(fs, dirs[fs]);
  return out;
}

try {
  await figure('cycle', () =>
    perFs((fs, dir) =>
      cycleFigure({
        dir: join(dir, 'cycle'),
        rounds: config.cycle.rounds[fs],
        cycles: config.cycle.cycles[fs],
        warmup: config.cycle.warmup,
        pinning,
        log,
      }),
    ),
  );
  await figure('renew', () =>
    perFs((fs, dir) =>
      renewFigure({
        dir: join(dir, 'renew'),
        rounds: config.cycle.rounds[fs],
        cycles: config.cycle.cycles[fs],
        warmup: config.cycle.warmup,
        pinning,
        log,
      }),
    ),
  );
  await figure('eventLoop', () => perFs((fs, dir) => eldFigure({ dir: join(dir, 'eld'), ...config.eventLoop, log })));
  await figure('scale', () =>
    perFs((fs, dir) =>
      scaleFigure({
        dir: join(dir, 'scale'),
        ids: config.scale.ids,
        iterations: config.scale.iterations,
        warmup: config.scale.warmup,
        rounds: config.scale.rounds[fs],
      }),
    ),
  );
  await figure('crash', () =>
    perFs(async (fs, dir) => {
      const out = {
        'floor-crash': await crashFloor({ dir: join(dir, 'crash-floor'), samples: config.crash.samples.lease }),
      };
      // The Lease and its Node floor interleaved, sample by sample; each peer on its own (2 s a sample).
      const sets = [['lease', 'node-floor-takeover']];
      if (config.crash.peersOn.includes(fs))
        sets.push(...CROSS_PROCESS_IMPLS.filter((k) => k !== 'lease').map((k) => [k]));
      for (const keys of sets) {
        const samples = config.crash.samples[keys.includes('lease') ? 'lease' : 'peers'];
        Object.assign(out, await crashTakeover({ keys, dir: join(dir, 'crash'), samples, log }));
      }
      return out;
    }),
  );
  await figure('wake', () =>
    perFs(async (fs, dir) => {
      // The Lease's hand-off, the C hand-off making the same durable commit and the Node floor's,
      // each two processes taking turns the same way (bench/figures/takeover.mjs, wakeUp), alternate
      // in rounds, the order rotating; peers after. Every side's first `warmup` hand-offs in a round
      // are kept apart (`first`), not judged.
      const { rounds, samples, warmup } = config.wake;
      const perRound = Math.ceil(samples.lease / rounds);
      const raw = { lease: [], leaseFromCall: [], 'floor-handoff': [], 'node-floor-handoff': [] };
      const first = { lease: [], 'floor-handoff': [], 'node-floor-handoff': [] };
      const runners = {
        lease: async (r) => {
          const wake = await wakeUp({ key: 'lease', dir: join(dir, `wake-${r}`), samples: perRound, warmup });
          first.lease.push(...wake.first);
          raw.lease.push(...wake.fromLetGo);
          raw.leaseFromCall.push(...wake.fromCall);
        },
      };
      // The two floors' hand-offs: the same protocol, in C and in Node.
      for (const [key, runtime] of [
        ['floor-handoff', 'c'],
        ['node-floor-handoff', 'node'],
      ]) {
        runners[key] = async (r) => {
          // Each releaser idles after letting go, as the Lease's does: what a releaser does next must
          // not be in the other's hand-off.
          const options = { durable: true, holdMs: WAKE_HOLD_MS, quietMs: WAKE_QUIET_MS, runtime };
          const handOffs = await gatherHandOffs({
            samples: perRound,
            warmup,
            pairOf: async (pair, wanted) => {
              const cycles = turnCycles(wanted);
              return { letGo: await floorHandOffs(join(dir, `wake-${key}-${r}-${pair}`), { ...options, cycles }) };
            },
          });
          first[key].push(...handOffs.first);
          raw[key].push(...handOffs.fromLetGo);
        };
      }
      for (let r = 0; r < rounds; r++) {
        for (const key of rotate(Object.keys(runners), r)) await runners[key](r);
      }
      const out = {
        lease: {
          ...summarize(raw.lease),
          fromReleaseCall: summarize(raw.leaseFromCall),
          first: summarize(first.lease),
        },
      };
      for (const key of CROSS_PROCESS_IMPLS.filter((k) => k !== 'lease')) {
        const wake = await wakeUp({ key, dir: join(dir, 'wake'), samples: samples.peers, warmup });
        out[key] = {
          ...summarize(wake.fromLetGo),
          fromReleaseCall: summarize(wake.fromCall),
          first: summarize(wake.first),
        };
      }
      for (const key of ['floor-handoff', 'node-floor-handoff'])
        out[key] = { ...summarize(raw[key]), first: summarize(first[key]) };
      log(`  wake-up: ${rounds} rounds`);
      return out;
    }),
  );
  await figure('contention', () =>
    perFs((fs, dir) =>
      contentionFigure({
        dir: join(dir, 'contention'),
        ...config.contention,
        peers: config.contention.peersOn.includes(fs) ? CROSS_PROCESS_IMPLS.filter((k) => k !== 'lease') : [],
        log,
      }),
    ),
  );
} finally {
  for (const dir of Object.values(dirs)) rmSync(dir, { recursive: true, force: true });
}

results.load.end = loadAverage();
results.finishedAt = new Date().toISOString();
results.durationS = Math.round((Date.now() - started) / 100) / 10;
results.targets = targets(results.figures, { busy: args.busy });

const report = markdown(results);
mkdirSync(outDir, { recursive: true });
writeFileSync(join(outDir, 'results.json'), `${JSON.stringify(results, null, 2)}\n`);
writeFileSync(join(outDir, 'results.md'), `${report}\n`);
writeFileSync(join(outDir, 'chart.svg'), chartSvg(results));
process.stdout.write(`${report}\n\nWrote ${join(outDir, 'results.json')}, results.md, chart.svg\n`);
if (results.errors.length > 0) {
  log(`${results.errors.length} figure(s) failed: ${results.errors.map((e) => e.figure).join(', ')}`);
  process.exitCode = 1;
}
