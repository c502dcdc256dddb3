// Evidence for docs/bench.md ("The sixteenth round"): how a contended Lease's throughput grows
// while V8 optimizes it. The contention figure's Lease side (bench/figures/contention.mjs: 8
// processes looping waiting acquire → release on one id), measured for `seconds` after each of
// several warm-ups, the warm-ups interleaved in rotating order. Flags after `--` go to the
// contenders' Node, e.g. `-- --max-opt=2` (no TurboFan) to see whether the growth is its.
//
//   node bench/evidence/warm-up.mjs [dir=/dev/shm] [rounds=3] [seconds=3] [warm-ups s=1,4,8,12,16] [processes=8] [-- node flags]
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { nodeRound } from '../figures/contention.mjs';
import { rotate } from '../figures/latency.mjs';
import { median } from '../lib/stats.mjs';

const args = process.argv.slice(2);
const dash = args.indexOf('--');
const execArgv = dash < 0 ? [] : args.slice(dash + 1);
const [base = '/dev/shm', roundsArg = '3', secondsArg = '3', warmupsArg = '1,4,8,12,16', processesArg = '8'] =
  dash < 0 ? args : args.slice(0, dash);
const seconds = Number(secondsArg);
const warmups = warmupsArg.split(',').map(Number);
const window = { processes: Number(processesArg), durationMs: seconds * 1000, pollMs: 0, execArgv };

const results = new Map(warmups.map((w) => [w, []]));
const root = mkdtempSync(join(base, 'warm-up-'));
try {
  for (let r = 0; r < Number(roundsArg); r++) {
    const line = [];
    for (const warmup of rotate(warmups, r)) {
      const dir = mkdtempSync(join(root, `${r}-${warmup}-`));
      const { cycles } = await nodeRound('lease', dir, { ...window, warmupMs: warmup * 1000 });
      results.get(warmup).push(cycles / seconds);
      line.push(`after ${warmup} s: ${Math.round(cycles / seconds)}/s`);
    }
    console.log(`round ${r + 1}: ${line.join(', ')}`);
  }
} finally {
  rmSync(root, { recursive: true, force: true });
}
for (const [warmup, rates] of results)
  console.log(
    `after ${String(warmup).padStart(2)} s: median ${Math.round(median(rates))}/s (${rates.map(Math.round).join(', ')})`,
  );
