// The bounded contention run (the long one is `npm run soak`): 8 worker processes on 4 ids, each
// logging every acquire / renew / release / loss and fenced write, while a nemesis SIGKILLs and
// SIGSTOPs / SIGCONTs them; then the independent checker (checker.mjs) reads the logs and must
// find no violation. And the same run against deliberately broken leases must find violations —
// proof that this test fails when the behaviour breaks.
import fs from 'node:fs';
import { describe, expect, test } from 'vitest';
import { formatFigures } from './checker.mjs';
import { runContention } from './contention.mjs';
import { filesystems } from '../helpers/dirs.js';

const SECONDS = 12;

// The two filesystems' runs at once: each has its own processes and directory, and its 12 s are
// timer-driven (the nemesis), not CPU-bound. The mutants stay one at a time: their margins are thin.
describe.concurrent.each(filesystems)('on %s', (fsName, root) => {
  test(
    `8 processes, 4 ids, ${SECONDS} s of random SIGKILLs and SIGSTOP/SIGCONT: the checker finds no violation`,
    { timeout: 120_000 },
    async () => {
      const result = await runContention({ root, seconds: SECONDS, workers: 8, ids: 4 });
      console.log(
        `[torture] contention on ${fsName}: ${formatFigures(result.figures)}\n          (logs: ${result.runDir})`,
      );
      expect(result.violations, JSON.stringify(result.violations.slice(0, 5), null, 2)).toEqual([]);
      expect(result.figures.violations).toBe(0);
      // It really was a torture: plenty of transitions, kills, suspensions, and the interesting
      // outcomes they force (a crash takeover, a holder losing its lease, a stale write fenced out).
      expect(result.figures.processes).toBeGreaterThan(8);
      expect(result.figures.transitions).toBeGreaterThan(100);
      expect(result.figures.kills).toBeGreaterThanOrEqual(5);
      expect(result.figures.suspensions).toBeGreaterThanOrEqual(5);
      expect(result.figures.killTakeovers).toBeGreaterThanOrEqual(1);
      expect(result.figures.handoffs).toBeGreaterThanOrEqual(1); // waiting acquires were handed leases
      expect(result.figures.losses).toBeGreaterThanOrEqual(1);
      expect(result.figures.staleRejected).toBeGreaterThanOrEqual(1);
      expect(result.figures.writesAccepted).toBeGreaterThan(100);
      fs.rmSync(result.runDir, { recursive: true, force: true }); // kept when the test fails, for the post-mortem
    },
  );
});

describe('the checker catches a broken lease (the same run with a lease broken on purpose)', () => {
  test.each([
    ['probe-lies', 'the liveness probe says every holder is dead: live holders are taken over', 'P1'],
    ['clock-ahead', "half the workers' lease clocks run 80% of a TTL fast: leases are taken before they expire", 'P1'],
    ['token-regress', 'half the workers read tokens as 0 on a clock 2 s slow: tokens go backwards', 'P2'],
  ] as const)('%s: %s', { timeout: 60_000 }, async (mutant, _what, property) => {
    const result = await runContention({ root: filesystems.at(-1)![1], seconds: 3, workers: 8, ids: 4, mutant });
    console.log(`[torture] mutant ${mutant}: ${JSON.stringify(result.byProperty)}`);
    expect(result.byProperty[property]).toBeGreaterThan(0);
    fs.rmSync(result.runDir, { recursive: true, force: true });
  });
});
