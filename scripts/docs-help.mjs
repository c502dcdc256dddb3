#!/usr/bin/env node
// The CLI references (docs/cli.md, docs/ticketing-production.md) show each command's `--help` verbatim, so
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
import path from 'node:path';
import { readDoc, root, syncBlocks } from './doc-blocks.mjs';

export const DOCS = ['docs/cli.md', 'docs/ticketing-production.md', 'docs/ticketing-election-client.md'];
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
  return [...readDoc(doc).matchAll(BLOCK)].map((m) => ({ commandLine: m[1], shown: m[2], actual: helpOf(m[1]) }));
}

if (import.meta.filename === path.resolve(process.argv[1] ?? '')) {
  syncBlocks({
    docs: DOCS,
    pattern: BLOCK,
    rewrite: (_all, commandLine) => `<!-- help: ${commandLine} -->\n\`\`\`\n${helpOf(commandLine)}\`\`\`\n`,
    blocksOf: helpBlocks,
    describe: (block) => `the block of \`${block.commandLine} --help\` differs from what it prints`,
    fix: 'npm run build && node scripts/docs-help.mjs --write',
  });
}
