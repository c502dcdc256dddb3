#!/usr/bin/env node
// README.md and docs/bench.md show the committed benchmark runs' tables, rendered from their
// results.json by the harness's own formatter (bench/lib/report.mjs), so a table in the docs is
// never a hand copy that drifts from the run it names. Each copy sits under a marker naming what it
// shows and the run it comes from, and ends at a closing marker:
//
//   <!-- bench: summary bench/results.json -->     the machine and load line, and the summary table
//   <!-- bench: targets bench/busy/results.json --> the T1–T8 verdicts, judged by today's rules
//   …
//   <!-- /bench -->
//
//   node scripts/docs-bench.mjs           check every block (exit 1 if one is stale)
//   node scripts/docs-bench.mjs --write   rewrite every block from the results files
//
// test/docs-bench.test.ts runs the check.
import fs from 'node:fs';
import path from 'node:path';
import { runLine, summaryTable, targets, targetsTable } from '../bench/lib/report.mjs';
import { readDoc, root, syncBlocks } from './doc-blocks.mjs';

export const DOCS = ['README.md', 'docs/bench.md'];
const BLOCK = /<!-- bench: (summary|targets) (\S+) -->\n([\s\S]*?)<!-- \/bench -->/g;

/** What a block of `kind` shows for the run in `file` (a path from the repository's root). */
export function render(kind, file) {
  const results = JSON.parse(fs.readFileSync(path.join(root, file), 'utf8'));
  const body =
    kind === 'summary'
      ? `${runLine(results)}\n\n${summaryTable(results)}`
      : targetsTable(targets(results.figures, { busy: Boolean(results.busy) }));
  return `${body}\n`;
}

/** Every block of a doc: what it shows, from which run, what the doc has and what it should have. */
export function benchBlocks(doc) {
  return [...readDoc(doc).matchAll(BLOCK)].map(([, kind, file, shown]) => ({
    kind,
    file,
    shown,
    actual: render(kind, file),
  }));
}

if (import.meta.filename === path.resolve(process.argv[1] ?? '')) {
  syncBlocks({
    docs: DOCS,
    pattern: BLOCK,
    rewrite: (_all, kind, from) => `<!-- bench: ${kind} ${from} -->\n${render(kind, from)}<!-- /bench -->`,
    blocksOf: benchBlocks,
    describe: (block) => `the ${block.kind} block of ${block.file} differs from the run`,
    fix: 'node scripts/docs-bench.mjs --write',
  });
}
