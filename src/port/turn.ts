import { setImmediate as nextTurn } from 'node:timers/promises';

/**
 * Lease operations that complete without the event loop turning (on tmpfs every step of the file
 * lease is synchronous; MemoryLease always is) would starve timers and I/O in a caller that awaits
 * them back to back: a promise chain of microtasks never yields. After MAX_RUN_MS of operations
 * with no turn of the loop in between, the next one yields one turn.
 */
const MAX_RUN_MS = 1;
/** When the current run of operations without a turn began; -1 when a turn has passed since. */
let runStart = -1;

export function yieldIfStarving(): Promise<void> | undefined {
  const now = performance.now();
  if (runStart < 0) {
    runStart = now;
    setImmediate(endRun); // any turn of the loop ends the run
    return undefined;
  }
  if (now - runStart < MAX_RUN_MS) return undefined;
  // Scheduled after endRun, so the run is over by the time we resume; timers and I/O ran first.
  return nextTurn();
}

/**
 * Before an operation's commit: one that began a run, because no operation finished since the loop
 * last turned (a server's request, not one of a batch awaited back to back), lets the loop turn
 * once first. It then holds the loop for its read side or for its commit, never both, which halves
 * its longest turns (the event-loop delay a caller sees). The later operations of a run go straight on, for
 * throughput, until MAX_RUN_MS.
 */
export function yieldIfRunStarts(): Promise<void> | undefined {
  return runStart < 0 ? nextTurn() : undefined;
}

function endRun(): void {
  runStart = -1;
}
