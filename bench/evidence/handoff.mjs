// Where a hand-off's time goes, step by step, as the wake-up figure meets it: a holder process
// releases after 30 ms idle while a waiter process is asleep in its waiting acquire. Every
// LeaseIO call of the release is timed (the Lease built with an instrumented copy of fileIO through
// the internal kIO hook; the waking close also with the process's CPU time during it), and so are
// the waiter's watch report (whose probe checks the hand-off: see HandOffProbe), split into the
// report's own run (the hand-off taken) and what follows it until the waiter's code runs, and its
// acquire resolving; a record read after the report, the fallback, is counted. Times are
// CLOCK_MONOTONIC (process.hrtime), shared by both processes; medians over the samples, µs. Imports
// the built package (dist/).
//
//   node bench/evidence/handoff.mjs [dir=/dev/shm] [samples=40]
import { fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { Lease, kIO } from '../../dist/flock/lease.js';
import { fileIO } from '../../dist/flock/io.js';

const [base = '/dev/shm', samplesArg = '40', role, childDir] = process.argv.slice(2);
const now = () => Number(process.hrtime.bigint()) / 1000;

/** fileIO with each call's start and end pushed to `trace.steps` while `trace.on`; the waking close
 * also leaves the process's CPU time during it in `trace.closeCpu` (wall time minus that is time off
 * the CPU). */
function tracedIO(trace) {
  const traced = {};
  for (const [name, call] of Object.entries(fileIO)) {
    traced[name] = (...args) => {
      if (!trace.on) return call(...args);
      const cpu = name === 'closeFile' ? process.cpuUsage() : undefined;
      trace.steps.push([`${name}<`, now()]);
      const result = call(...args);
      if (cpu !== undefined) {
        const { user, system } = process.cpuUsage(cpu);
        trace.closeCpu ??= user + system; // the first close: the one that wakes the waiter
      }
      if (typeof result?.then === 'function') {
        return result.then((value) => (trace.steps.push([`${name}>`, now()]), value));
      }
      trace.steps.push([`${name}>`, now()]);
      return result;
    };
  }
  return traced;
}

if (role === 'waiter') {
  const marks = {};
  const io = {
    ...fileIO,
    watchUnlock: (path, report, probe, mode) =>
      fileIO.watchUnlock(
        path,
        (errno, token, expiry) => {
          marks.reported ??= now();
          const after = report(errno, token, expiry); // the hand-off taken and the acquire resolved in it
          marks.returned ??= now();
          return after;
        },
        probe,
        mode,
      ),
    // Only when the watch's probe could not confirm the hand-off (the waiter then reads it itself).
    readRecord: (path) => (marks.reported !== undefined && (marks.read ??= now()), fileIO.readRecord(path)),
  };
  const lease = new Lease(childDir, { ttlMs: 30_000, [kIO]: io });
  process.on('message', async (message) => {
    if (message === 'stop') process.exit(0);
    for (const key of Object.keys(marks)) delete marks[key];
    process.send('waiting');
    const grant = await lease.acquire('handoff', 'waiter', { waitMs: 10_000 });
    process.send({ ...marks, resolved: now() });
    await lease.release(grant);
  });
} else {
  const dir = mkdtempSync(join(base, 'handoff-'));
  const trace = { on: false, steps: [] };
  const lease = new Lease(dir, { ttlMs: 30_000, [kIO]: tracedIO(trace) });
  const waiter = fork(new URL(import.meta.url).pathname, [base, samplesArg, 'waiter', dir]);
  const next = () => new Promise((resolve) => waiter.once('message', resolve));
  const gaps = new Map();
  let fallbacks = 0; // hand-offs the waiter had to read itself: its watch's probe could not confirm them
  const add = (name, us) => (gaps.get(name) ?? gaps.set(name, []).get(name)).push(us);
  try {
    for (let i = 0; i < Number(samplesArg); i++) {
      const grant = await lease.acquire('handoff', 'holder', { waitMs: 10_000 });
      waiter.send('go');
      await next();
      await new Promise((resolve) => setTimeout(resolve, 30)); // the waiter is asleep by now
      trace.steps = [['release called', now()]];
      trace.closeCpu = undefined;
      trace.on = true;
      await lease.release(grant);
      trace.steps.push(['release resolved', now()]);
      trace.on = false;
      const { reported, returned, read, resolved } = await next();
      const steps = trace.steps;
      for (let j = 1; j < steps.length; j++)
        add(`A: ${steps[j - 1][0]} → ${steps[j][0]}`, steps[j][1] - steps[j - 1][1]);
      const closed = steps.find(([name]) => name === 'closeFile<')?.[1];
      add("A: closeFile, the process's CPU time (process.cpuUsage)", trace.closeCpu);
      add('B: A closes its .live → B watch reported', reported - closed);
      add('B: watch reported → B acquire resolved', resolved - reported);
      add('B:   of which in the report (the hand-off taken, the acquire resolved)', returned - reported);
      add("B:   of which after the report, to the caller's code", resolved - returned);
      if (read !== undefined) fallbacks++;
      add('A closes its .live → B acquire resolved (T8)', resolved - closed);
      add('A release resolved → B acquire resolved', resolved - steps.at(-1)[1]);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  } finally {
    waiter.send('stop');
    rmSync(dir, { recursive: true, force: true });
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  for (const [name, xs] of gaps) console.log(`${String(median(xs).toFixed(0)).padStart(6)} µs  ${name}`);
  console.log(`B read the record itself (its watch's probe could not confirm the hand-off) ${fallbacks} times`);
}
