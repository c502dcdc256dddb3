// --help for every command (with an example), --version, and usage errors: exit 64.
import fs from 'node:fs';
import { describe, expect, test } from 'vitest';
import { cli } from './cli.js';

const COMMANDS = ['inspect', 'run', 'prune', 'repair', 'release'] as const;

describe('flocklease --help', () => {
  test.each(COMMANDS)('%s --help: usage, every option, an example; exit 0 on stdout', async (command) => {
    const result = await cli([command, '--help']);
    expect(result.code).toBe(0);
    expect(result.stderr).toBe('');
    expect(result.stdout).toMatch(new RegExp(`^Usage: flocklease ${command} `));
    expect(result.stdout).toMatch(/\nExamples:\n {2}\$ flocklease /);
    expect(result.stdout).toContain(`$ flocklease ${command} `);
    expect(result.stdout).toContain('--help');
    // `flocklease help <command>` says the same.
    expect((await cli(['help', command])).stdout).toBe(result.stdout);
  });

  test('the main help lists the commands, durations and exit codes; --version prints the package version', async () => {
    const result = await cli(['--help']);
    expect(result.code).toBe(0);
    for (const command of COMMANDS) expect(result.stdout).toMatch(new RegExp(`\\n {2}${command} `));
    expect(result.stdout).toMatch(/Durations: 500ms, 30s, 5m, 2h/);
    for (const code of ['0 ', '64', '65', '75', '79', '1 '])
      expect(result.stdout).toMatch(new RegExp(`\\n {2}${code} `));
    const pkg = JSON.parse(fs.readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
      version: string;
    };
    expect(await cli(['--version'])).toMatchObject({ code: 0, stdout: `${pkg.version}\n` });
  });

  test('no command, an unknown command or option, a bad duration: exit 64 with a message on stderr', async () => {
    const bare = await cli([]);
    expect(bare.code).toBe(64);
    expect(bare.stdout).toBe('');
    expect(bare.stderr).toMatch(/^Usage: flocklease/);
    const cases: Array<[string[], RegExp]> = [
      [['frobnicate'], /^flocklease: unknown command 'frobnicate'/],
      [['inspect'], /^flocklease: missing required argument 'dir'/],
      [['inspect', '/tmp', '--color'], /^flocklease: unknown option '--color'/],
      [
        ['prune', '/tmp', '--older-than', 'a week'],
        /^flocklease: option '--older-than <duration>' argument 'a week' is invalid/,
      ],
      [
        ['prune', '/tmp', '--lock-timeout', '0'],
        /^flocklease: option '--lock-timeout <duration>' argument '0' is invalid\. must be more than 0/,
      ],
      [['release', '/tmp', '--force'], /^flocklease: required option '--id <id>' not specified/],
    ];
    for (const [args, message] of cases) {
      const result = await cli(args);
      expect(result.code, args.join(' ')).toBe(64);
      expect(result.stderr, args.join(' ')).toMatch(message);
    }
  });
});
