// The thin vitest adapter over the exported, framework-agnostic conformance suite.
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, test } from 'vitest';
import { conformanceCases } from '../src/conformance/index.js';
import { Lease } from '../src/flock/lease.js';
import { MemoryLease } from '../src/memory/memory-lease.js';
import { filesystems, freshDir } from './helpers/dirs.js';

describe('MemoryLease (fake clock)', () => {
  let now = Date.UTC(2026, 10, 29, 9);
  const cases = conformanceCases({
    ttlMs: 30_000,
    create: () => new MemoryLease({ ttlMs: 30_000, clock: () => now }),
    advance: (ms) => {
      now += ms;
    },
  });
  for (const c of cases) test(c.name, () => c.run());
});

describe.each(filesystems)('Lease on %s (real clock, short TTL)', (_fs, root) => {
  const base = freshDir(root);
  let n = 0;
  // Long enough that a durable commit stalled by the shared disk, with every case committing at once
  // inside the full suite, does not expire a holder before a case has checked that it holds (at
  // 200 ms one CI run saw "acquire while bob holds it" succeed).
  const ttlMs = 1_000;
  const cases = conformanceCases({
    ttlMs,
    create: () => new Lease(join(base, `case-${n++}`), { ttlMs }),
    advance: (ms) => sleep(ms),
  });
  // The real-clock cases sleep past the TTL; run them concurrently (separate dirs) to keep the suite fast.
  for (const c of cases) test.concurrent(c.name, () => c.run());
});
