// Evidence for docs/bench.md ("The seventeenth round"): where a contended cycle's time goes, and
// what it responds to. N Lease processes loop waiting acquire → release on one id (the contention
// figure's loop), and after a warm-up each times its cycles on CLOCK_MONOTONIC (shared by all of
// them) through an instrumented fileIO (the internal kIO hook): its acquire resolved, its release
// called, the close of its `.live` that wakes the next in line, its release resolved, its watch's
// report, and the first watch of its next acquire (its place in line taken). Merged in time order,
// each two consecutive cycles of two processes are one hand-off: B's release up to the close that
// wakes C, that close to C's report, C's report to C's acquire resolved. B's release is split
// further: its transition lock taken (a wait when the lock was busy), its one native step (tmpfs
// only: see Lease.#handOffInOneStep), the lock let go, and the waking close. Only the window in
// which every process was looping counts (the processes start and stop at slightly different
// times, and with fewer in line a process can follow itself), and for it the share of the time
// spent in long hand-offs (over 0.5, 1, 2 and 5 ms) is printed: a mean cycle well above the median
// one is a tail of stalls, which a trace of the scheduler explains (docs/bench.md, "The
// twenty-fourth round").
// Two variants add CPU time (a spin) to every release: `before close` just before the waking close
// (on the hand-off's path), `after release` once the release has resolved (off it: the releaser's
// own time before its next acquire). Rounds of the three interleave, their order rotating.
// Imports the built package (dist/).
//
//   node bench/evidence/critical-path.mjs [dir=/dev/shm] [rounds=3] [seconds=3] [warm-up s=10] [processes=8] [spin µs=50]
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { rotate } from '../figures/latency.mjs';
import { nodeJson } from '../lib/child.mjs';
import { median } from '../lib/stats.mjs';

const now = () => Number(process.hrtime.bigint()) / 1000; // µs
const spin = (us) => {
  for (const until = now() + us; now() < until;);
};

const args = process.argv.slice(2);
if (args[0] === '--child') {
  const [, dir, warmupArg, secondsArg, variant, spinArg] = args;
  const { Lease, kIO } = await import('../../dist/flock/lease.js');
  const { fileIO } = await import('../../dist/flock/io.js');
  const spinUs = Number(spinArg);
  const marks = { close: 0, report: 0, watch: 0, locked: 0, stepCalled: 0, stepReturned: 0, unlock: 0 };
  let releasing = false;
  const io = {
    ...fileIO,
    closeFile(fd) {
      if (releasing) {
        if (variant === 'before close') spin(spinUs);
        marks.close = now(); // a release closes one file: its .live, which wakes the next in line
      }
      return fileIO.closeFile(fd);
    },
    tryLockTransition(path) {
      const fd = fileIO.tryLockTransition(path);
      if (releasing && typeof fd === 'number') marks.locked = now();
      return fd;
    },
    releaseHandOff(dir, step) {
      if (releasing) marks.stepCalled = now();
      try {
        return fileIO.releaseHandOff(dir, step);
      } finally {
        if (releasing) marks.stepReturned = now();
      }
    },
    unlockTransition(fd) {
      if (releasing) marks.unlock = now();
      return fileIO.unlockTransition(fd);
    },
    watchUnlock(path, report, probe, mode) {
      marks.watch ||= now();
      const reported = (errno, token, expiry) => ((marks.report = now()), report(errno, token, expiry));
      return fileIO.watchUnlock(path, reported, probe, mode);
    },
  };
  const lease = new Lease(dir, { ttlMs: 30_000, [kIO]: io });
  const owner = `p${process.pid}`;
  const from = now() + Number(warmupArg) * 1e6;
  const until = from + Number(secondsArg) * 1e6;
  // [held, release called, waking close, release resolved, report, previous cycle's first watch,
  //  release's lock taken, its step called, its step returned, its lock let go]
  const cycles = [];
  for (let started = now(); started < until; started = now()) {
    const watched = marks.watch;
    marks.watch = 0;
    marks.report = 0;
    const grant = await lease.acquire('contended', owner, { waitMs: 30_000 });
    const held = now();
    const report = marks.report;
    releasing = true;
    marks.stepCalled = 0;
    const releaseAt = now();
    await lease.release(grant);
    const released = now();
    releasing = false;
    if (variant === 'after release') spin(spinUs);
    if (started >= from) {
      const { close, locked, stepCalled, stepReturned, unlock } = marks;
      cycles.push(
        [held, releaseAt, close, released, report, watched, locked, stepCalled, stepReturned, unlock].map(Math.round),
      );
    }
  }
  process.stdout.write(`${JSON.stringify(cycles)}\n`, () => process.exit(0));
} else {
  const [base = '/dev/shm', roundsArg = '3', secondsArg = '3', warmupArg = '10', processesArg = '8', spinArg = '50'] =
    args;
  const variants = ['plain', 'before close', 'after release'];
  const results = Object.fromEntries(variants.map((v) => [v, { throughput: [], phases: new Map(), stalls: [] }]));
  const STALLS_US = [500, 1000, 2000, 5000];
  const child = (dir, variant) =>
    nodeJson([fileURLToPath(import.meta.url), '--child', dir, warmupArg, secondsArg, variant, spinArg]);
  for (let r = 0; r < Number(roundsArg); r++) {
    const line = [];
    for (const variant of rotate(variants, r)) {
      const dir = mkdtempSync(join(base, 'critical-path-'));
      try {
        const perProcess = await Promise.all(Array.from({ length: Number(processesArg) }, () => child(dir, variant)));
        // Only while every process loops: the first to stop leaves a shorter line.
        const from = Math.max(...perProcess.map((cycles) => cycles[0][0]));
        const until = Math.min(...perProcess.map((cycles) => cycles.at(-1)[0]));
        const all = perProcess
          .flatMap((cycles, p) =>
            cycles.map(
              ([held, releaseAt, close, released, report, watched, locked, stepCalled, stepReturned, unlock]) => ({
                p,
                held,
                releaseAt,
                close,
                released,
                report,
                watched,
                locked,
                stepCalled,
                stepReturned,
                unlock,
              }),
            ),
          )
          .filter(({ held }) => held >= from && held <= until)
          .sort((a, b) => a.held - b.held);
        const { throughput, phases, stalls } = results[variant];
        const add = (name, us) => (phases.get(name) ?? phases.set(name, []).get(name)).push(us);
        throughput.push(Math.round(all.length / ((until - from) / 1e6)));
        const stalled = STALLS_US.map(() => 0);
        for (let i = 1; i < all.length; i++) {
          const [b, c] = [all[i - 1], all[i]];
          for (let k = 0; k < STALLS_US.length; k++) if (c.held - b.held > STALLS_US[k]) stalled[k] += c.held - b.held;
          if (b.p === c.p || c.report === 0) continue; // not a hand-off between two processes
          add('cycle (B holds → C holds)', c.held - b.held);
          add("B's release called → the close that wakes C", b.close - b.releaseAt);
          add('  … → its transition lock taken', b.locked - b.releaseAt);
          if (b.stepCalled !== 0) {
            add('  … → its one step called', b.stepCalled - b.locked);
            add('  … → the step returned', b.stepReturned - b.stepCalled);
            add('  … → the lock let go', b.unlock - b.stepReturned);
          } else add('  … → the lock let go', b.unlock - b.locked);
          add('  … → the waking close', b.close - b.unlock);
          add("that close → C's watch reports", c.report - b.close);
          add("C's report → C's acquire resolved", c.held - c.report);
        }
        stalls.push(stalled.map((us) => us / (until - from)));
        // Each process's next acquire after a release: from its release resolved to its first watch.
        for (const cycles of perProcess) {
          for (let i = 2; i < cycles.length; i++) {
            if (cycles[i][5] !== 0)
              add("B's release resolved → B's next place in line taken", cycles[i][5] - cycles[i - 2][3]);
          }
        }
        line.push(`${variant} ${throughput.at(-1)}/s`);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }
    console.log(`round ${r + 1}: ${line.join(', ')}`);
  }
  const plain = median(results.plain.throughput);
  for (const variant of variants) {
    const { throughput, phases } = results[variant];
    const med = median(throughput);
    const extra =
      variant === 'plain'
        ? ''
        : ` (${spinArg} µs spin ${variant}: ${(1e6 / med - 1e6 / plain).toFixed(0)} µs more per cycle)`;
    console.log(`\n${variant}: median ${med} cycles/s, ${(1e6 / med).toFixed(0)} µs per cycle${extra}`);
    for (const [name, us] of phases) console.log(`  ${String(Math.round(median(us))).padStart(6)} µs  ${name}`);
    const shares = STALLS_US.map(
      (us, k) => `> ${us / 1000} ms ${(100 * median(results[variant].stalls.map((round) => round[k]))).toFixed(1)} %`,
    );
    console.log(`  time in long hand-offs (B holds → C holds), median over rounds: ${shares.join(', ')}`);
  }
}
