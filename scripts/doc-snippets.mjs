// The Ticketing docs' code blocks that a user would paste are run as written by
// test/docs-snippets.test.ts. Each fenced block with a language sits under a marker saying how:
//
//   <!-- doc-run: sh <group> -->       run with `sh -e`; it must exit 0 (what it starts in the
//                                       background lives until its group ends)
//   <!-- doc-run: server <group> -->   a server: started with `sh`, ready once it prints `listening`,
//                                       stopped when its group ends
//   <!-- doc-run: node <group> -->     an ES module run with node; it must exit 0
//   <!-- doc-run: promtool <group> --> a Prometheus config: `promtool check config` must pass
//   <!-- doc-skip: <why> -->           not run, and why (production addresses, the npm registry, …)
//
// A group's blocks run in order, in one scratch directory that looks like a clone to them (`npx
// ticketing`, `@flocklease/ticketing` and `flocklease` resolve to this repository); the docs are
// read in the order of DOCS. Blocks without a language (output, sessions, --help) are not pasted.
import { readDoc } from './doc-blocks.mjs';

/** The docs whose blocks are run, in the order their blocks run within a group. */
export const DOCS = [
  'docs/ticketing-production.md',
  'docs/ticketing.md',
  'docs/ticketing-client.md',
  'docs/ticketing-election-client.md',
  'docs/ticketing-cluster.md',
  'docs/ticketing-bench.md',
  'ticketing/README.md',
];

const KINDS = new Set(['sh', 'server', 'node', 'promtool']);
const FENCE = /^```(\S*)\n([\s\S]*?)^```$/gm;
const MARKER = /<!-- doc-(run|skip): ([^>]*?) -->\n$/;

/**
 * Every fenced block of a doc that has a language: where it is, its code, and its marker (`run`:
 * kind and group; `skip`: the reason; `problem`: what is wrong with the marker, or its absence).
 */
export function snippetBlocks(doc) {
  const text = readDoc(doc);
  const blocks = [];
  for (const match of text.matchAll(FENCE)) {
    const [, lang, code] = match;
    if (lang === '') continue;
    const line = text.slice(0, match.index).split('\n').length;
    const block = { doc, line, lang, code, where: `${doc}:${line}` };
    const marker = MARKER.exec(text.slice(Math.max(0, match.index - 200), match.index));
    if (!marker) block.problem = `a \`\`\`${lang} block without a doc-run or doc-skip marker`;
    else if (marker[1] === 'skip') block.skip = marker[2];
    else {
      const [kind, group, ...rest] = marker[2].split(/\s+/);
      if (!KINDS.has(kind) || !group || rest.length > 0)
        block.problem = `a bad marker: doc-run: ${marker[2]} (want: <sh|server|node|promtool> <group>)`;
      else block.run = { kind, group };
    }
    blocks.push(block);
  }
  return blocks;
}

/** The blocks to run, by group, each group's blocks in the order they run. */
export function groups() {
  const byGroup = new Map();
  for (const block of DOCS.flatMap(snippetBlocks)) {
    if (!block.run) continue;
    const list = byGroup.get(block.run.group) ?? [];
    list.push(block);
    byGroup.set(block.run.group, list);
  }
  return byGroup;
}
