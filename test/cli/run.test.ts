// `flocklease run`: the command runs under the lease, its status is run's status, signals are
// forwarded, a loss terminates it (exit 79), --wait waits, a held lease exits 75 naming the holder.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { describe, expect, test } from 'vitest';
import { Lease } from '../../src/flock/lease.js';
import { inspectLeaseDir } from '../../src/flock/operator/index.js';
import { LeaseAgent } from '../helpers/agent.js';
import { freshDir } from '../helpers/dirs.js';
import { readRecordFile } from '../helpers/lease-files.js';
import { alive, BIN, cli, CliProcess, until } from './cli.js';

const CHILD = fileURLToPath(new URL('./fixtures/child.mjs', import.meta.url));
const node = process.execPath;

function runArgs(dir: string, id: string, ...rest: string[]): string[] {
  return ['run', '--dir', dir, '--id', id, ...rest];
}

describe('flocklease run', () => {
  test('runs the command holding the lease, with the grant in its environment; releases; exits with its status', async () => {
    const dir = freshDir();
    const result = await cli(runArgs(dir, 'job', '--owner', 'me', '--ttl', '20s', '--', node, CHILD, 'report', '7'));
    expect(result.code).toBe(7);
    const report = JSON.parse(result.stdout) as {
      env: Record<string, string>;
      lease: { state: string; owner: string; token: string; pid: number };
      parentName: string;
      runPid: number;
    };
    const record = readRecordFile(dir, 'job');
    expect(record).toMatchObject({ owner: '', token: BigInt(report.env.FLOCKLEASE_TOKEN!) }); // released afterwards
    expect(report.env).toEqual({
      FLOCKLEASE_DIR: dir,
      FLOCKLEASE_SESSION: 'job',
      FLOCKLEASE_OWNER: 'me',
      FLOCKLEASE_TOKEN: expect.stringMatching(/^\d+$/) as unknown,
      FLOCKLEASE_EXPIRY: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/) as unknown,
      FLOCKLEASE_TTL_MS: '20000',
    });
    const expiresIn = Date.parse(report.env.FLOCKLEASE_EXPIRY!) - Date.now();
    expect(expiresIn).toBeGreaterThan(10_000);
    expect(expiresIn).toBeLessThanOrEqual(20_000);
    // While it ran, the lease was held by run itself, under that token; the command's parent is
    // run's supervisor (comm is cut to 15 characters).
    expect(report.lease).toEqual({
      state: 'held',
      owner: 'me',
      token: report.env.FLOCKLEASE_TOKEN,
      pid: report.runPid,
    });
    expect(report.parentName).toBe('flocklease-supe');
    expect(result.stderr).toBe('');

    const zero = await cli(runArgs(dir, 'job', node, CHILD, 'report', '0')); // no `--`: the command's own flags are its own
    expect(zero.code).toBe(0);
    const again = JSON.parse(zero.stdout) as { env: Record<string, string> };
    expect(BigInt(again.env.FLOCKLEASE_TOKEN!)).toBeGreaterThan(BigInt(report.env.FLOCKLEASE_TOKEN!));
    expect(again.env.FLOCKLEASE_OWNER).toMatch(/-\d+$/); // default owner: hostname-pid
  });

  test('a command killed by a signal gives 128+n; one not found 127; one not executable 126 — and the lease is released', async () => {
    const dir = freshDir();
    expect((await cli(runArgs(dir, 'job', '--', 'sh', '-c', 'kill -TERM $$'))).code).toBe(143);
    expect((await cli(runArgs(dir, 'job', '--', 'sh', '-c', 'kill -KILL $$'))).code).toBe(137);
    const missing = await cli(runArgs(dir, 'job', '--', join(dir, 'no-such-command')));
    expect(missing.code).toBe(127);
    expect(missing.stderr).toMatch(/^flocklease: cannot run ".*no-such-command": command not found\n$/);
    const plain = join(dir, 'not-executable');
    fs.writeFileSync(plain, 'echo hi\n', { mode: 0o644 });
    const denied = await cli(runArgs(dir, 'job', '--', plain));
    expect(denied.code).toBe(126);
    expect(inspectLeaseDir(dir, { id: 'job' }).leases[0]!.state).toBe('released');
  });

  test('forwards SIGUSR1, SIGUSR2, SIGHUP, SIGINT, SIGQUIT and SIGTERM to the command, and exits with its status', async () => {
    const dir = freshDir();
    const run = new CliProcess(runArgs(dir, 'job', '--', node, CHILD, 'trap'));
    await run.output(/ready \d+/);
    for (const sig of ['SIGUSR1', 'SIGUSR2', 'SIGHUP', 'SIGINT', 'SIGQUIT'] as const) {
      run.kill(sig);
      await run.output(new RegExp(`got ${sig}`));
    }
    expect(inspectLeaseDir(dir, { id: 'job' }).leases[0]).toMatchObject({ state: 'held', pid: run.pid });
    run.kill('SIGTERM');
    const result = await run.done;
    expect(result.code).toBe(42); // the command's own exit status on SIGTERM
    expect(result.stdout.match(/got SIG\w+/g)).toEqual([
      'got SIGUSR1',
      'got SIGUSR2',
      'got SIGHUP',
      'got SIGINT',
      'got SIGQUIT',
      'got SIGTERM',
    ]);
    expect(inspectLeaseDir(dir, { id: 'job' }).leases[0]!.state).toBe('released');
  });

  test.each([
    ['in its own process group (the default)', []],
    ['with --foreground', ['--foreground']],
  ])('a Ctrl-C typed at a terminal reaches the command exactly once, %s', async (_name, flags) => {
    // A real terminal: `script` runs run under a pseudo-terminal whose input we type into.
    const dir = freshDir();
    // `exec`: script runs the line with $SHELL -c (or /bin/sh); a shell left waiting in the
    // foreground would take the Ctrl-C itself (dash then dies of it once run exits).
    const command = `exec ${[node, BIN, ...runArgs(dir, 'job', ...flags, '--', node, CHILD, 'trap')].map((a) => `'${a}'`).join(' ')}`;
    const tty = spawn('script', ['-qefc', command, '/dev/null'], { stdio: ['pipe', 'pipe', 'inherit'] });
    let screen = '';
    tty.stdout.on('data', (chunk: Buffer) => (screen += chunk.toString()));
    const exited = once(tty, 'close');
    try {
      const ready = await until(() => /ready \d+ parent (\d+)/.exec(screen) ?? undefined, 'the command to start');
      for (let presses = 1; presses <= 2; presses++) {
        tty.stdin.write('\x03');
        await until(
          () => ((screen.match(/got SIGINT/g)?.length ?? 0) >= presses ? true : undefined),
          `Ctrl-C number ${presses}`,
        );
        await sleep(300); // a second delivery of the same Ctrl-C would show by now
        expect(screen.match(/got SIGINT/g)).toHaveLength(presses);
      }
      process.kill(Number(ready[1]), 'SIGTERM'); // run itself, from outside the terminal
      const [code] = (await exited) as [number];
      expect(code).toBe(42);
      expect(screen.match(/got SIG\w+/g)).toEqual(['got SIGINT', 'got SIGINT', 'got SIGTERM']);
    } finally {
      tty.kill('SIGKILL');
    }
  });

  test('on loss (force-released by another process): SIGTERM to the command and its process group, exit 79', async () => {
    const dir = freshDir();
    const run = new CliProcess(runArgs(dir, 'job', '--ttl', '900ms', '--', node, CHILD, 'group'));
    const grandchild = Number((await run.output(/grandchild (\d+)/))[1]);
    await run.output(/ready \d+/);
    const held = inspectLeaseDir(dir, { id: 'job' }).leases[0]!;
    expect(held).toMatchObject({ state: 'held', pid: run.pid });

    const broke = await cli(['release', dir, '--id', 'job', '--force']);
    expect(broke.code).toBe(0);
    const result = await run.done;
    expect(result.code).toBe(79);
    expect(result.stdout).toMatch(/got SIGTERM/);
    expect(result.stderr).toMatch(
      /^flocklease: lease "job" was lost: it was released \(token \d+\); terminating the command \(SIGTERM, SIGKILL after 5s\)$/m,
    );
    expect(result.stderr).toMatch(/the command ended \(status 0\) after the lease was lost: exit 79/);
    await until(() => (alive(grandchild) ? undefined : true), 'the grandchild to be gone'); // the group got SIGTERM too
    // The next holder gets a greater token than the broken one.
    const next = await new Lease(dir).acquire('job', 'next');
    expect(next.token).toBeGreaterThan(held.token!);
  });

  test('on loss a command that ignores SIGTERM is SIGKILLed after --kill-after', async () => {
    const dir = freshDir();
    const run = new CliProcess(
      runArgs(dir, 'job', '--ttl', '900ms', '--kill-after', '300ms', '--', node, CHILD, 'ignore-term'),
    );
    await run.output(/ready \d+/);
    expect((await cli(['release', dir, '--id', 'job', '--force'])).code).toBe(0);
    await run.output(/was lost/);
    const lostAt = performance.now();
    const result = await run.done;
    const tookMs = performance.now() - lostAt;
    expect(result.code).toBe(79);
    expect(result.stdout).toMatch(/got SIGTERM \(ignored\)/);
    expect(result.stderr).toMatch(/did not exit within 300ms of SIGTERM: SIGKILL/);
    expect(result.stderr).toMatch(/the command ended \(killed by SIGKILL\)/);
    expect(tookMs).toBeGreaterThan(250); // it had its grace...
    expect(tookMs).toBeLessThan(10_000); // ...and not much more
  });

  test('--wait: waits in line while the lease is held, then runs the command when the holder releases it', async () => {
    const dir = freshDir();
    const holder = await LeaseAgent.start(dir, 60_000);
    await holder.acquire('job', 'alice');
    const run = new CliProcess(runArgs(dir, 'job', '--wait', '20s', '--', node, CHILD, 'report', '0'));
    await until(
      () => (inspectLeaseDir(dir, { id: 'job' }).leases[0]!.waiters.length === 1 ? true : undefined),
      'run to queue',
    );
    expect(run.stdout).toBe(''); // the command has not run
    const releasedAt = Date.now();
    expect((await holder.call({ op: 'release' })).ok).toBe(true);
    const result = await run.done;
    expect(result.code).toBe(0);
    const report = JSON.parse(result.stdout) as { lease: { state: string; pid: number } };
    expect(report.lease).toMatchObject({ state: 'held', pid: run.pid });
    expect(Date.now() - releasedAt).toBeLessThan(10_000);
  });

  test('held and not obtained: exit 75 and one line naming the holder; the command never runs', async () => {
    const dir = freshDir();
    const holder = await LeaseAgent.start(dir, 60_000);
    const held = await holder.acquire('job', 'alice');
    const marker = join(dir, 'ran');
    const now = await cli(runArgs(dir, 'job', '--', 'touch', marker));
    expect(now.code).toBe(75);
    expect(now.stderr).toMatch(
      new RegExp(
        `^flocklease: lease "job" is held by alice \\(pid ${holder.pid}, token ${held.token}, expires \\S+Z, in \\S+\\)\\n$`,
      ),
    );
    const waited = await cli(runArgs(dir, 'job', '--wait', '300ms', '--', 'touch', marker));
    expect(waited.code).toBe(75);
    expect(waited.stderr).toMatch(
      new RegExp(
        `^flocklease: lease "job" not obtained within 300ms: held by alice \\(pid ${holder.pid}, token ${held.token}, .*\\)\\n$`,
      ),
    );
    expect(fs.existsSync(marker)).toBe(false);
    expect(inspectLeaseDir(dir, { id: 'job' }).leases[0]).toMatchObject({ state: 'held', owner: 'alice', waiters: [] });
  });

  test('a signal while waiting ends the wait: exit 128+n, out of the queue, the command never runs', async () => {
    const dir = freshDir();
    const holder = await LeaseAgent.start(dir, 60_000);
    await holder.acquire('job', 'alice');
    const marker = join(dir, 'ran');
    const run = new CliProcess(runArgs(dir, 'job', '--wait', 'forever', '--', 'touch', marker));
    await until(
      () => (inspectLeaseDir(dir, { id: 'job' }).leases[0]!.waiters.length === 1 ? true : undefined),
      'run to queue',
    );
    run.kill('SIGTERM');
    expect((await run.done).code).toBe(143);
    expect(inspectLeaseDir(dir, { id: 'job' }).leases[0]!.waiters).toEqual([]);
    expect((await holder.call({ op: 'release' })).ok).toBe(true);
    expect(fs.existsSync(marker)).toBe(false);
  });

  test('usage errors exit 64 with a message, before touching the directory', async () => {
    const dir = join(freshDir(), 'leases');
    const cases: Array<[string[], RegExp]> = [
      [
        runArgs(dir, 'job', '--ttl', '5x', '--', 'true'),
        /option '--ttl <duration>' argument '5x' is invalid\. invalid duration "5x": use e\.g\. 500ms, 30s, 5m/,
      ],
      [runArgs(dir, 'job', '--ttl', '0', '--', 'true'), /must be more than 0/],
      // A bare number is not milliseconds (nor seconds): a unit is required.
      [
        runArgs(dir, 'job', '--ttl', '10', '--', 'true'),
        /argument '10' is invalid\. duration "10" has no unit: write 10s or 10ms/,
      ],
      [runArgs(dir, 'job', '--wait', '5', '--', 'true'), /duration "5" has no unit: write 5s or 5ms/],
      [runArgs(dir, 'job', '--kill-after', '2.5', '--', 'true'), /duration "2\.5" has no unit: write 2\.5s or 2\.5ms/],
      [['prune', dir, '--older-than', '24'], /duration "24" has no unit/],
      [runArgs(dir, 'job', '--wait', 'soon', '--', 'true'), /invalid duration "soon"/],
      [['run', '--dir', dir, '--', 'true'], /required option '--id <id>' not specified/],
      [runArgs(dir, 'job'), /missing required argument 'command'/],
      [runArgs(dir, '', '--', 'true'), /--id must not be empty/],
      [['run', '--bogus', '--dir', dir, '--id', 'x', '--', 'true'], /unknown option '--bogus'/],
    ];
    for (const [args, message] of cases) {
      const result = await cli(args);
      expect(result.code, args.join(' ')).toBe(64);
      expect(result.stderr, args.join(' ')).toMatch(message);
      expect(result.stderr).toMatch(/^flocklease: /);
    }
    expect(fs.existsSync(dir)).toBe(false);
  });
});
