// Scale: 10 000 ids held by one process (bench/agents/scale.mjs, a child with --expose-gc): heap
// and fds per held lease, and op latency with 10 000 held vs with 1.
import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { median, round } from '../lib/stats.mjs';

const SCALE = join(dirname(fileURLToPath(import.meta.url)), '..', 'agents', 'scale.mjs');

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
          // Held-count effect: at N ÷ at 1, where "at 1" is the mean of the measurements before
          // (fresh directory) and after (same directory, back to 1 held): this cancels drift along
          // the round and the directory's growth, which are not the held count.
          renewRatio: round(raw.renew.atN.p50 / ((raw.renew.at1.p50 + raw.renew.at1After.p50) / 2)),
          cycleRatio: round(raw.cycle.atN.p50 / ((raw.cycle.at1.p50 + raw.cycle.at1After.p50) / 2)),
          renewRatioFresh: round(raw.renew.atN.p50 / raw.renew.at1.p50),
          cycleRatioFresh: round(raw.cycle.atN.p50 / raw.cycle.at1.p50),
          heapPerLeaseBytes: med('heapPerLeaseBytes'),
          heapPerLeaseWithoutGrantsBytes: med('heapPerLeaseWithoutGrantsBytes'),
          fdsPerLease: med('fdsPerLease'),
          ...raw,
        });
      },
    );
  });
}
