// The Ticketing docs' code blocks run as written (scripts/doc-snippets.mjs says how each is marked):
// every block a user would paste is run here or says why not, each group's servers and etcd are
// started by its own blocks on 127.0.0.1, and everything a group started is killed with its
// process groups when the group ends. Needs the build (`npm run build`); a group whose tools
// (openssl, etcd, etcdctl, promtool) are missing is skipped with one line saying why.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { DOCS, groups, snippetBlocks, type SnippetBlock } from '../scripts/doc-snippets.mjs';

const ROOT = path.resolve(import.meta.dirname, '..');
const STEP_MS = 25_000;

test('every code block of the Ticketing docs is run here, or says why not', () => {
  const problems = DOCS.flatMap(snippetBlocks)
    .filter((b) => b.problem)
    .map((b) => `${b.where}: ${b.problem}`);
  expect(problems).toEqual([]);
});

const onPath = (tool: string) => spawnSync('sh', ['-c', `command -v ${tool}`]).status === 0;
/** The tools a group's blocks call, beyond node and npx. */
function missingTools(blocks: SnippetBlock[]): string[] {
  const code = blocks.map((b) => (b.run!.kind === 'promtool' ? 'promtool' : b.code)).join('\n');
  return ['openssl', 'etcd', 'etcdctl', 'promtool'].filter((t) => new RegExp(`\\b${t}\\b`).test(code) && !onPath(t));
}

/**
 * A scratch directory that looks like a clone to the blocks: `ticketing` in node_modules/.bin, and
 * both packages resolve to this repository. Its `.shim/npx` runs a bin of node_modules/.bin as npx
 * would find it, without npm's second of start-up per call (the test below runs the real npx once).
 */
function scratch(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'doc-snippets-'));
  fs.mkdirSync(path.join(dir, 'node_modules', '.bin'), { recursive: true });
  fs.mkdirSync(path.join(dir, 'node_modules', '@flocklease'));
  fs.symlinkSync(path.join(ROOT, 'ticketing'), path.join(dir, 'node_modules', '@flocklease', 'ticketing'));
  fs.symlinkSync(ROOT, path.join(dir, 'node_modules', 'flocklease'));
  fs.symlinkSync(path.join(ROOT, 'ticketing', 'dist', 'cli.js'), path.join(dir, 'node_modules', '.bin', 'ticketing'));
  fs.mkdirSync(path.join(dir, '.shim'));
  fs.writeFileSync(
    path.join(dir, '.shim', 'npx'),
    '#!/bin/sh\ncmd="$1"; shift\nexec "$PWD/node_modules/.bin/$cmd" "$@"\n',
    {
      mode: 0o755,
    },
  );
  return dir;
}

test("npx ticketing, in a clone, runs the clone's ticketing (offline)", () => {
  const dir = scratch();
  try {
    const env = { ...process.env, npm_config_offline: 'true', npm_config_update_notifier: 'false' };
    const run = spawnSync('npx', ['ticketing', '--version'], { cwd: dir, env, encoding: 'utf8', timeout: 20_000 });
    expect(run.stdout.trim(), run.stderr).toMatch(/^\d+\.\d+\.\d+$/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}, 25_000);

interface Finished {
  code: number | null;
  output: string;
}

/** Runs to its end (or is killed after STEP_MS); its output, for the failure message. */
function finish(child: ChildProcess): Promise<Finished> {
  let output = '';
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), STEP_MS - 2_000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

/** Resolves once the server prints `listening`; rejects if it exits first or takes too long. */
function listening(child: ChildProcess): Promise<void> {
  let output = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no "listening" within 15 s:\n${output}`)), 15_000);
    const seen = (chunk: Buffer) => {
      output += chunk.toString();
      if (/^listening /m.test(output)) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout!.on('data', seen);
    child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.on('exit', (code) => reject(new Error(`exited ${code} before listening:\n${output}`)));
  });
}

describe.each([...groups()])('group %s', (_group, blocks) => {
  const missing = missingTools(blocks);
  let dir = '';
  const started: ChildProcess[] = [];
  const env = { ...process.env, PATH: '' };
  const start = (command: string, args: string[]) => {
    const child = spawn(command, args, { cwd: dir, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    started.push(child);
    return child;
  };

  beforeAll(() => {
    if (missing.length === 0) dir = scratch();
    env.PATH = `${path.join(dir, '.shim')}${path.delimiter}${process.env.PATH}`;
  });
  afterAll(() => {
    // Each block ran in a process group of its own: that group holds whatever it started in the
    // background too (etcd, nodes), even after its shell exited.
    for (const child of started) {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // the group is gone already
      }
    }
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  test.skipIf(missing.length > 0).each(blocks.map((b) => [`${b.where} (${b.run!.kind})`, b] as const))(
    '%s',
    async (_name, block) => {
      const { kind } = block.run!;
      if (kind === 'server') return listening(start('sh', ['-c', block.code]));
      let result: Finished;
      if (kind === 'sh') result = await finish(start('sh', ['-ec', block.code]));
      else {
        const file = path.join(dir, `block-${block.line}.${kind === 'node' ? 'mjs' : 'yml'}`);
        fs.writeFileSync(file, block.code);
        result = await finish(
          kind === 'node' ? start(process.execPath, [file]) : start('promtool', ['check', 'config', file]),
        );
      }
      expect(result.code, `${block.where}\n${block.code}\n${result.output}`).toBe(0);
    },
    STEP_MS,
  );
  if (missing.length > 0) test.skip(`needs ${missing.join(', ')} (scripts/setup.sh installs them)`, () => {});
});
