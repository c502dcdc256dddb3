// What the generators of the docs' blocks share (docs-help.mjs, docs-bench.mjs): each copy in a doc
// sits under a marker naming what it shows, so it can be checked against its source or rewritten.
import fs from 'node:fs';
import path from 'node:path';

/** The repository's root. */
export const root = path.resolve(import.meta.dirname, '..');

/** The text of a doc (a path from the root). */
export const readDoc = (doc) => fs.readFileSync(path.join(root, doc), 'utf8');

/**
 * A generator's command line. With `--write`: every block `pattern` matches in `docs` is rewritten
 * by `rewrite` (a String.replace replacer). Without: every block `blocksOf(doc)` finds whose `shown`
 * text differs from its `actual` one is reported (`describe` names it) and the process exits 1,
 * saying to run `fix`.
 */
export function syncBlocks({ docs, pattern, rewrite, blocksOf, describe, fix }) {
  if (process.argv.includes('--write')) {
    for (const doc of docs) fs.writeFileSync(path.join(root, doc), readDoc(doc).replace(pattern, rewrite));
    return;
  }
  let stale = 0;
  for (const doc of docs) {
    for (const block of blocksOf(doc)) {
      if (block.shown === block.actual) continue;
      stale++;
      console.error(`${doc}: ${describe(block)}:\n${block.actual}`);
    }
  }
  if (stale > 0) {
    console.error(`run \`${fix}\``);
    process.exit(1);
  }
}
