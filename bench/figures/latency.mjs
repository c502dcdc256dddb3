// Acquire+release cycle and renew latency, in-process (tinybench), side by side with the C floor.
//
// Every implementation gets its own subdirectory of the same directory (same file system), the same
// number of cycles over the same 4 rotating ids (as `floor dir N durable 4` does), the same warm-up,
// and runs in interleaved rounds (A B C … then B C … A, …: the order rotates each round) so that
// load drift on a shared machine hits all alike. Where it can (`pinning`, bench/lib/machine.mjs),
// each round runs on one vCPU, every implementation and the C floor alike, the vCPU alternating
// from round to round. The Node floor (bench/lib/node-floor.mjs) runs in this process, as the
// Lease does. The figure is the median over rounds of each round's p50 (and p99); every sample is
// also pooled into a raw summary.
import { join } from 'node:path';
import { floorCycles, floorRenews } from '../lib/c-floor.mjs';
import { CYCLE_IMPLS, IMPLS } from '../lib/impls.mjs';
import { roundsSummary } from '../lib/stats.mjs';
import { tinySamples } from '../lib/tiny.mjs';

const IDS = 4;

/** Rotates `list` left by `by`. */
export function rotate(list, by) {
  const k = by % list.length;
  return [...list.slice(k), ...list.slice(0, k)];
}

/** Cycle latency (µs) per implementation on one directory: { [key]: roundsSummary }. */
export async function cycleFigure({ dir, rounds, cycles, warmup, pinning, log }) {
  const runners = {
    'floor-durable': () => floorCycles(join(dir, 'floor-durable'), { cycles, warmup, durable: true, ids: IDS }),
    floor: () => floorCycles(join(dir, 'floor'), { cycles, warmup, durable: false, ids: IDS }),
  };
  for (const key of CYCLE_IMPLS) {
    const impl = IMPLS[key].open(join(dir, key));
    let i = 0;
    const cycle = async () => {
      const release = await impl.lock(`id-${i++ % IDS}`);
      await release();
    };
    runners[key] = () => tinySamples(key, cycle, { iterations: cycles, warmup });
  }
  return interleave(runners, { rounds, pinning, log, what: 'cycle' });
}

/** Renew latency (µs): Lease and MemoryLease (the peers have no renew) and the C floor's renew. */
export async function renewFigure({ dir, rounds, cycles, warmup, pinning, log }) {
  const runners = {
    'floor-durable': () => floorRenews(join(dir, 'floor-renew'), { renews: cycles, warmup, durable: true }),
  };
  for (const key of ['lease', 'memory']) {
    const { lease } = IMPLS[key].open(join(dir, `${key}-renew`));
    let grant = await lease.acquire('renewed', 'bench-renew');
    const renew = async () => {
      grant = await lease.renew(grant);
    };
    runners[key] = () => tinySamples(`${key} renew`, renew, { iterations: cycles, warmup });
    runners[key].done = () => lease.release(grant);
  }
  const result = await interleave(runners, { rounds, pinning, log, what: 'renew' });
  for (const runner of Object.values(runners)) await runner.done?.();
  return result;
}

async function interleave(runners, { rounds, pinning, log, what }) {
  const keys = Object.keys(runners);
  const samples = Object.fromEntries(keys.map((k) => [k, []]));
  try {
    for (let r = 0; r < rounds; r++) {
      const cpu = pinning?.cpus[r % pinning.cpus.length];
      if (pinning) pinning.pin(cpu);
      for (const key of rotate(keys, r)) samples[key].push(await runners[key]());
      log?.(`  ${what} round ${r + 1}/${rounds}${pinning ? ` (vCPU ${cpu})` : ''}`);
    }
  } finally {
    pinning?.unpin();
  }
  return Object.fromEntries(keys.map((k) => [k, roundsSummary(samples[k])]));
}
