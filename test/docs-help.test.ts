// docs/cli.md and docs/ticketing-production.md show every command's --help verbatim (scripts/docs-help.mjs):
// the help is the one home of each command's options and exit codes, and the docs never drift.
import { describe, expect, test } from 'vitest';
import { helpBlocks } from '../scripts/docs-help.mjs';

const EXPECTED: Record<string, string[]> = {
  'docs/cli.md': [
    'flocklease',
    'flocklease inspect',
    'flocklease run',
    'flocklease prune',
    'flocklease repair',
    'flocklease release',
  ],
  'docs/ticketing-production.md': ['ticketing', 'ticketing serve', 'ticketing inspect'],
};

describe.each(Object.entries(EXPECTED))('%s', (doc, commands) => {
  const blocks = helpBlocks(doc);

  test('has the --help of every command, once', () => {
    expect(blocks.map((b) => b.commandLine).sort()).toEqual([...commands].sort());
  });

  test.each(commands)('shows exactly what `%s --help` prints', (commandLine) => {
    const block = blocks.find((b) => b.commandLine === commandLine)!;
    expect(block.shown).toBe(block.actual);
  });
});
