// Scale: 10 000 ids held by one process (bench/agents/scale.mjs, a child with --expose-gc): heap
// and fds per held lease, and op latency with 10 000 held vs with 1.
import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { median, round } from '../lib/stats.mjs';

const SCALE = join(dirname(fileURLToPath(import.meta.url)), '..', 'agents', 'scale.mjs');

/**
 * Held-count effect: at N ÷ at 1 within each round, the median over rounds. "At 1" is the mean of
 * the round's measurements before (fresh directory) and after (same directory, back to 1 held),
 * which cancels drift along the round and the directory's growth, which are not the held count;
 * taking each ratio within its round keeps one round's slow disk from meeting another's fast one.
 */
function heldCountRatio(op, at1) {
  return round(median(op.atN.rounds.map((r, i) => r.p50 / at1(op, i))));
}

export function scaleFigure({ dir, ids, iterations, warmup, rounds }) {
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      ['--expose-gc', SCALE, dir, String(ids), String(iterations), String(warmup), String(rounds)],
      { maxBuffer: 64 * 1024 * 1024, timeout: 900_000 },
      (error, stdout, stderr) => {
        if (error) return reject(Object.assign(error, { stderr }));
        const raw = JSON.parse(stdout);
        const med = (field) => round(median(raw.memory.map((m) => m[field])));
        resolve({
          ids: raw.ids,
          renewRatio: heldCountRatio(raw.renew, (s, i) => (s.at1.rounds[i].p50 + s.at1After.rounds[i].p50) / 2),
          cycleRatio: heldCountRatio(raw.cycle, (s, i) => (s.at1.rounds[i].p50 + s.at1After.rounds[i].p50) / 2),
          renewRatioFresh: heldCountRatio(raw.renew, (s, i) => s.at1.rounds[i].p50),
          cycleRatioFresh: heldCountRatio(raw.cycle, (s, i) => s.at1.rounds[i].p50),
          heapPerLeaseBytes: med('heapPerLeaseBytes'),
          heapPerLeaseWithoutGrantsBytes: med('heapPerLeaseWithoutGrantsBytes'),
          fdsPerLease: med('fdsPerLease'),
          ...raw,
        });
      },
    );
  });
}
