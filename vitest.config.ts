import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', 'ticketing/test/**/*.test.ts'],
    // Cross-process tests spawn real processes and flock real files: give them room on a busy CI box.
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
});
