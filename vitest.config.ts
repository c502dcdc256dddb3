import os from 'node:os';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', 'ticketing/test/**/*.test.ts'],
    // Cross-process tests spawn real processes and flock real files: give them room on a busy CI box.
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Three files at a time on 2 cores (vitest's default there is one): most of the suite waits on
    // child processes, sockets, etcd and leases, not on the CPU.
    maxWorkers: Math.max(3, os.availableParallelism() - 1),
  },
});
