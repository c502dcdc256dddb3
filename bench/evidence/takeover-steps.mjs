// Evidence for docs/bench.md ("The twelfth round"). Run from the repository root after npm run build:
//   node bench/evidence/takeover-steps.mjs [dir root] [samples]
// Where a queued waiter's crash takeover spends its time once its watch has reported: a holder
// process (its own Lease) is SIGKILLed while this process waits in line; every LeaseIO call the
// waiter makes from the watch's report to its acquire resolving is timed (the commit too: its
// promise, so the worker thread's hop is in it), and the gaps between calls are the JavaScript.
// Prints each step's median over the samples, in the order the calls were made.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Lease } from '../../dist/index.js';
import { kIO } from '../../dist/flock/lease.js';
import { fileIO } from '../../dist/flock/io.js';

const root = process.argv[2] ?? '/tmp';
const samples = Number(process.argv[3] ?? 40);
const dist = fileURLToPath(new URL('../../dist/index.js', import.meta.url));

/** One sample's calls after the report: [name, start, end] in ms, and the report's time. */
let trace;
const io = {};
for (const [name, call] of Object.entries(fileIO)) {
  io[name] = (...args) => {
    const start = performance.now();
    const done = (value) => (trace?.calls.push([name, start, performance.now()]), value);
    const result = call(...args);
    return result instanceof Promise ? result.then(done) : done(result);
  };
}
io.watchUnlock = (path, report, probe, mode) =>
  fileIO.watchUnlock(
    path,
    (...args) => {
      if (trace !== undefined) trace.reported = performance.now();
      return report(...args);
    },
    probe,
    mode,
  );

const holderCode = `
  const { Lease } = await import(${JSON.stringify(dist)});
  const lease = new Lease(process.argv[1], { ttlMs: 60000 });
  await lease.acquire('s', 'holder');
  process.stdout.write('held\\n');
  setInterval(() => {}, 1000);`;

const steps = new Map(); // "n. call" or "n. JavaScript, then" (before call n) → µs per sample
const add = (key, us) => (steps.get(key) ?? steps.set(key, []).get(key)).push(us);
const resolved = [];

for (let i = 0; i < samples; i++) {
  const dir = join(root, `takeover-steps-${process.pid}-${i}`);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  // Not our child (a shell starts it and exits): its death must not reach this process as a
  // SIGCHLD and a child's 'exit' in the middle of the takeover, as it does not in the crash figure.
  const shell = spawn(
    'sh',
    ['-c', '"$0" --input-type=module -e "$1" "$2" & echo $!', process.execPath, holderCode, dir],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  const shellExited = once(shell, 'exit');
  const lines = createInterface({ input: shell.stdout })[Symbol.asyncIterator]();
  const holder = Number((await lines.next()).value);
  await lines.next(); // held
  await shellExited;
  const waiter = new Lease(dir, { ttlMs: 60_000, [kIO]: io });
  const waiting = waiter.acquire('s', 'waiter', { waitMs: 10_000 });
  await new Promise((resolve) => setTimeout(resolve, 40)); // queued, watching, idle (as in the crash figure)
  trace = { calls: [], reported: undefined };
  process.kill(holder, 'SIGKILL');
  const grant = await waiting;
  const end = performance.now();
  const { calls, reported } = trace;
  trace = undefined;
  let at = reported;
  for (const [n, [name, start, stop]] of calls.filter(([, start]) => start >= reported).entries()) {
    add(`${n + 1}. JavaScript, then`, (start - at) * 1000);
    add(`${n + 1}. ${name}`, (stop - start) * 1000);
    at = stop;
  }
  add('JavaScript to the grant', (end - at) * 1000);
  resolved.push((end - reported) * 1000);
  await waiter.release(grant);
  rmSync(dir, { recursive: true, force: true });
}

const median = (list) => list.toSorted((a, b) => a - b)[Math.floor(list.length / 2)];
console.log(`${samples} crash takeovers in ${root}; µs, medians (a step seen in fewer samples says so)`);
for (const [key, list] of steps) {
  const seen = list.length === samples ? '' : `  (${list.length} of ${samples})`;
  console.log(`${median(list).toFixed(0).padStart(7)}  ${key}${seen}`);
}
console.log(`${median(resolved).toFixed(0).padStart(7)}  report → acquire resolved`);
