// README.md and docs/bench.md show the committed runs' tables as the harness renders them from
// bench/results.json and bench/busy/results.json (scripts/docs-bench.mjs): a table in the docs is
// the run it names, never a stale copy.
import { describe, expect, test } from 'vitest';
import { benchBlocks } from '../scripts/docs-bench.mjs';

const EXPECTED: Record<string, string[]> = {
  'README.md': ['summary bench/results.json'],
  'docs/bench.md': [
    'summary bench/results.json',
    'summary bench/busy/results.json',
    'targets bench/results.json',
    'targets bench/busy/results.json',
  ],
};

describe.each(Object.entries(EXPECTED))('%s', (doc, expected) => {
  const blocks = benchBlocks(doc);

  test('has each table of the committed runs it shows, once', () => {
    expect(blocks.map((b) => `${b.kind} ${b.file}`)).toEqual(expected);
  });

  test.each(expected)('shows the %s table as the harness renders it', (name) => {
    const block = blocks.find((b) => `${b.kind} ${b.file}` === name)!;
    expect(block.shown).toBe(block.actual);
  });
});
