import os from 'node:os';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', 'ticketing/test/**/*.test.ts'],
    // Cross-process tests spawn real processes and flock real files: give them room on a busy CI box.
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Two files at a time even on 2 cores (vitest's default there is one): most of the suite waits
    // on child processes, sockets, etcd and leases, not on the CPU. Measured on 2 cores: the
    // Ticketing tests outside cluster/ 501 s with one worker, 285 s with two.
    maxWorkers: Math.max(2, os.availableParallelism() - 1),
  },
});
