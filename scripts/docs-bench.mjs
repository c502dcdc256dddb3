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

const root = path.resolve(import.meta.dirname, '..');
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
  const text = fs.readFileSync(path.join(root, doc), 'utf8');
  return [...text.matchAll(BLOCK)].map(([, kind, file, shown]) => ({ kind, file, shown, actual: render(kind, file) }));
}

function write(doc) {
  const file = path.join(root, doc);
  const text = fs.readFileSync(file, 'utf8');
  fs.writeFileSync(
    file,
    text.replace(BLOCK, (_all, kind, from) => `<!-- bench: ${kind} ${from} -->\n${render(kind, from)}<!-- /bench -->`),
  );
}

if (import.meta.filename === path.resolve(process.argv[1] ?? '')) {
  if (process.argv.includes('--write')) {
    for (const doc of DOCS) write(doc);
  } else {
    let stale = 0;
    for (const doc of DOCS) {
      for (const block of benchBlocks(doc)) {
        if (block.shown === block.actual) continue;
        stale++;
        console.error(`${doc}: the ${block.kind} block of ${block.file} differs from the run:\n${block.actual}`);
      }
    }
    if (stale > 0) {
      console.error('run `node scripts/docs-bench.mjs --write`');
      process.exit(1);
    }
  }
}
