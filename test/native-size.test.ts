// The C side's file size limit (scripts/check-native-size.mjs, run by `npm run lint`): lines of
// code, blank lines and comments not counted, at most 700 per file under native/.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect, test } from 'vitest';

const script = new URL('../scripts/check-native-size.mjs', import.meta.url).pathname;

function check(files: Record<string, string>): { status: number | null; stderr: string } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'native-size-'));
  try {
    for (const [name, text] of Object.entries(files)) {
      fs.mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
      fs.writeFileSync(path.join(dir, name), text);
    }
    const { status, stderr } = spawnSync(process.execPath, [script, dir], { encoding: 'utf8' });
    return { status, stderr };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const code = (n: number): string => 'int x;\n'.repeat(n);

test('a file of 700 lines of code passes, however many blank and comment lines it has', () => {
  const comments = '// a comment\n\n/* a block\n   comment */\n'.repeat(100);
  expect(check({ 'src/a.c': comments + code(700), 'src/a.h': code(700) }).status).toBe(0);
});

test('a file of 701 lines of code fails, named; a string holding // is code', () => {
  const result = check({ 'src/ok.c': code(10), 'src/big.c': code(700) + 'char *s = "//x";\n' });
  expect(result.status).toBe(1);
  expect(result.stderr).toContain('big.c: 701 lines of code (max 700)');
  expect(result.stderr).not.toContain('ok.c');
});

test('the build directory is not checked', () => {
  expect(check({ 'build/gen.c': code(800) }).status).toBe(0);
});

test('native/ as it is passes', () => {
  expect(spawnSync(process.execPath, [script], { encoding: 'utf8' }).status).toBe(0);
});
