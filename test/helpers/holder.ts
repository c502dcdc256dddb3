// A process of its own holding an exclusive flock on a file (test/fixtures/flock-holder.mjs).
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';

const HOLDER = fileURLToPath(new URL('../fixtures/flock-holder.mjs', import.meta.url));

export type Holder = Awaited<ReturnType<typeof holdElsewhere>>;

/** A process holding `path` exclusively until `release()` (or `kill()`). */
export async function holdElsewhere(path: string) {
  const child = spawn(process.execPath, [HOLDER, path], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const next = async (): Promise<string> => String((await lines.next()).value);
  expect(await next()).toBe('held');
  return {
    async release(): Promise<void> {
      child.stdin.write('release\n');
      expect(await next()).toBe('released');
    },
    async kill(): Promise<void> {
      child.kill('SIGKILL');
      await once(child, 'exit');
    },
    async end(): Promise<void> {
      if (child.exitCode === null && child.signalCode === null) {
        child.stdin.end();
        child.kill('SIGKILL');
        await once(child, 'exit');
      }
    },
  };
}
