// `npm run demo` (examples/demo.mjs): the takeover it shows, and that it removes its temp directory.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { expect, test } from 'vitest';
import { freshDir } from './helpers/dirs.js';

const DEMO = fileURLToPath(new URL('../examples/demo.mjs', import.meta.url));

test('the demo shows a takeover after kill -9 and leaves no temp directory behind', async () => {
  const tmp = freshDir();
  const child = spawn(process.execPath, [DEMO], {
    env: { ...process.env, TMPDIR: tmp },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let stdout = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), 25_000);
  const [code] = (await once(child, 'close')) as [number | null];
  clearTimeout(timer);
  expect(code, stdout).toBe(0);
  expect(stdout).toMatch(/takeover \d+ ms after the kill/);
  expect(fs.readdirSync(tmp)).toEqual([]);
});
