// One of N processes contending for one id: loops waiting acquire → release until the window ends.
//   node contender.mjs <impl> <dir> <pollMs>
// Prints {"ready":pid}, then reads one line {"startAt","warmupMs","durationMs"} (sharedNow ms) and,
// after the window, prints {"cycles","waitsMs"}: the cycles whose acquire started inside the
// measured window [startAt + warmupMs, + durationMs), each with its wait (acquire called → held).
import { createInterface } from 'node:readline';
import { IMPLS } from '../lib/impls.mjs';
import { sharedNow, sleep } from '../lib/stats.mjs';

const [key, dir, pollMs] = process.argv.slice(2);
const impl = IMPLS[key].open(dir, { wait: true, pollMs: Number(pollMs) });
process.stdout.write(`${JSON.stringify({ ready: process.pid })}\n`);
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const { startAt, warmupMs, durationMs } = JSON.parse((await lines.next()).value);
const from = startAt + warmupMs;
const until = from + durationMs;
await sleep(Math.max(0, startAt - sharedNow()));
const waitsMs = [];
for (let start = sharedNow(); start < until; start = sharedNow()) {
  const release = await impl.lock('contended');
  const held = sharedNow();
  await release();
  if (start >= from) waitsMs.push(held - start);
}
process.stdout.write(`${JSON.stringify({ cycles: waitsMs.length, waitsMs })}\n`);
process.exit(0);
