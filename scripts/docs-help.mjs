#!/usr/bin/env node
// The CLI references (docs/cli.md, docs/ticketing.md) show each command's `--help` verbatim, so
// the help text is the one home of what a command accepts and how it exits. Each copy sits under
// a marker naming the command line it comes from:
//
//   <!-- help: flocklease inspect -->
//   ```
//   …exactly what `flocklease inspect --help` prints…
//   ```
//
//   node scripts/docs-help.mjs           check every block (exit 1 and a diff-like report if stale)
//   node scripts/docs-help.mjs --write   rewrite every block from the built CLIs (npm run build first)
//
// test/docs-help.test.ts runs the check.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const root = path.resolve(import.meta.dirname, '..');
export const DOCS = ['docs/cli.md', 'docs/ticketing.md'];
const BINS = {
  flocklease: path.join(root, 'dist', 'cli', 'main.js'),
  ticketing: path.join(root, 'ticketing', 'dist', 'cli.js'),
};
const BLOCK = /<!-- help: ([^>]+?) -->\n```\n([\s\S]*?)```\n/g;

/** What `<bin> <args…> --help` prints, as a pipe sees it (commander wraps at 80 columns then). */
export function helpOf(commandLine) {
  const [bin, ...args] = commandLine.split(' ');
  const file = BINS[bin];
  if (file === undefined) throw new Error(`unknown command ${bin} in a help marker`);
  return execFileSync(process.execPath, [file, ...args, '--help'], {
    encoding: 'utf8',
    env: { ...process.env, COLUMNS: '80', NO_COLOR: '1' },
  });
}

/** Every help block of a doc: its command line, what the doc shows, and what the CLI prints. */
export function helpBlocks(doc) {
  const text = fs.readFileSync(path.join(root, doc), 'utf8');
  return [...text.matchAll(BLOCK)].map((m) => ({ commandLine: m[1], shown: m[2], actual: helpOf(m[1]) }));
}

function write(doc) {
  const file = path.join(root, doc);
  const text = fs.readFileSync(file, 'utf8');
  fs.writeFileSync(
    file,
    text.replace(BLOCK, (_all, commandLine) => `<!-- help: ${commandLine} -->\n\`\`\`\n${helpOf(commandLine)}\`\`\`\n`),
  );
}

if (import.meta.filename === path.resolve(process.argv[1] ?? '')) {
  if (process.argv.includes('--write')) {
    for (const doc of DOCS) write(doc);
  } else {
    let stale = 0;
    for (const doc of DOCS) {
      for (const block of helpBlocks(doc)) {
        if (block.shown === block.actual) continue;
        stale++;
        console.error(
          `${doc}: the block of \`${block.commandLine} --help\` differs from what it prints:\n${block.actual}`,
        );
      }
    }
    if (stale > 0) {
      console.error('run `npm run build && node scripts/docs-help.mjs --write`');
      process.exit(1);
    }
  }
}
