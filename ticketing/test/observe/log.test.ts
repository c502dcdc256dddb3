/** The log of a real `ticketing serve`: JSON lines on stderr (start without the secret, listening,
 * the expiry of a SIGKILLed holder's lease, rate-limited connection errors, drain and exit), and
 * stdout with exactly the one listening line. */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, test } from 'vitest';
import { TicketClient } from '../../src/client.js';
import { CLI, LineSocket, until } from '../helpers.js';
import { request, sample } from './support.js';

const INDEX = fileURLToPath(new URL('../../dist/index.js', import.meta.url));
const SECRET = 'sup3r-s3cret-l0g-test';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

interface Serve {
  readonly child: ChildProcess;
  readonly port: number;
  stdout(): string;
  stderr(): string;
  /** The stderr lines, parsed. */
  lines(): Array<Record<string, unknown>>;
  readonly exit: Promise<number | null>;
}

async function serve(args: string[], execArgv: string[] = []): Promise<Serve> {
  const child = spawn(process.execPath, [...execArgv, CLI, 'serve', '--port', '0', ...args]);
  cleanups.push(() => void child.kill('SIGKILL'));
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk) => (stdout += chunk));
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const exit = once(child, 'exit').then(([code]) => code as number | null);
  await until(() => stdout.includes('\n') || child.exitCode !== null, 'the listening line', 10_000);
  const port = Number(/^listening 127\.0\.0\.1:(\d+)\n/.exec(stdout)?.[1]);
  if (!(port > 0)) throw new Error(`no listening line: ${stdout} ${stderr}`);
  const lines = (): Array<Record<string, unknown>> =>
    stderr
      .split('\n')
      .filter((line) => line !== '')
      .map((line) => JSON.parse(line) as Record<string, unknown>);
  return { child, port, stdout: () => stdout, stderr: () => stderr, lines, exit };
}

/** A real process that takes `key` through TicketClient, says so, and then holds it until killed. */
async function holder(port: number, key: string, owner: string): Promise<ChildProcess> {
  const script = `
    import { TicketClient } from ${JSON.stringify(INDEX)};
    const client = new TicketClient({ port: ${port}, secret: ${JSON.stringify(SECRET)} });
    const r = await client.acquire(${JSON.stringify(key)}, { owner: ${JSON.stringify(owner)} });
    process.stdout.write(r.status + ' ' + (r.token ?? '') + '\\n');
    setInterval(() => {}, 1000);`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script]);
  cleanups.push(() => void child.kill('SIGKILL'));
  const [line] = (await once(child.stdout, 'data')) as [Buffer];
  expect(line.toString()).toMatch(/^acquired \d+\n$/);
  return child;
}

describe('ticketing serve logs', () => {
  test('start, listening, an expired lease with key/owner/token, drain and exit; one stdout line', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ticketing-log-'));
    const secretFile = join(dir, 'secret');
    writeFileSync(secretFile, `${SECRET}\n`);
    const s = await serve(['--secret-file', secretFile, '--lease', '500ms', '--http', '127.0.0.1:0']);
    const held = await holder(s.port, 'orders', 'worker-7');
    held.kill('SIGKILL');
    await once(held, 'exit');
    // A waiter gets the key when the dead holder's lease runs out.
    const client = new TicketClient({ port: s.port, secret: SECRET });
    cleanups.push(() => client.close());
    const next = await client.acquire('orders', { owner: 'worker-8', waitMs: 5_000 });
    expect(next.status).toBe('acquired');
    // The killed holder's grant counts as an expiry in the metrics too.
    const httpPort = s.lines().find((l) => l.msg === 'http listening')!.port as number;
    const metrics = (await request(httpPort, '/metrics')).body;
    expect(sample(metrics, 'ticketing_expirations_total')).toBe(1);
    await client.close();
    s.child.kill('SIGTERM');
    expect(await s.exit).toBe(0);

    expect(s.stdout()).toBe(`listening 127.0.0.1:${s.port}\n`);
    expect(s.stderr()).not.toContain(SECRET);
    const lines = s.lines();
    for (const line of lines) {
      expect(typeof line.time).toBe('string');
      expect(typeof line.level).toBe('string');
      expect(line.pid).toBe(s.child.pid);
    }
    const messages = lines.map((line) => line.msg);
    expect(messages[0]).toBe('starting');
    const config = lines[0]!.config as Record<string, unknown>;
    expect(config.secretFile).toBe(secretFile);
    expect(config.lease).toBe(500);
    expect(lines.find((l) => l.msg === 'listening')).toMatchObject({ level: 'info', host: '127.0.0.1', port: s.port });
    const expired = lines.filter((l) => l.msg === 'lease expired: the holder never released');
    expect(expired).toHaveLength(1);
    expect(expired[0]).toMatchObject({ level: 'info', key: 'orders', owner: 'worker-7' });
    expect(expired[0]!.token).toMatch(/^\d+$/);
    expect(messages.slice(-2)).toEqual(['draining', 'exit']);
    expect(lines.at(-1)).toMatchObject({ code: 0 });
  });

  test('connection errors are rate-limited: a burst of bad connections logs at most 10 lines and a count', async () => {
    const s = await serve([]);
    for (let i = 0; i < 40; i++) {
      const socket = await LineSocket.connect(s.port);
      socket.write('GET / HTTP/1.1\r\n\r\n');
      await socket.waitClosed();
    }
    s.child.kill('SIGTERM');
    expect(await s.exit).toBe(0);
    const lines = s.lines();
    const errors = lines.filter((l) => l.msg === 'connection closed on error');
    expect(errors).toHaveLength(10);
    expect(errors[0]).toMatchObject({ level: 'warn', reason: 'bad_request' });
    expect(errors[0]!.remote).toMatch(/^127\.0\.0\.1:\d+$/);
    expect(lines.find((l) => l.msg === 'connection errors not logged (rate limit)')).toMatchObject({
      suppressed: 30,
      level: 'warn',
    });
  });

  test('a process warning is a JSON log line; an error is logged with its own message once', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ticketing-log-'));
    const secretFile = join(dir, 'secret');
    writeFileSync(secretFile, `${SECRET}\n`);
    // A dependency's deprecation, as @grpc/grpc-js's DEP0123 for https etcd endpoints given as IPs.
    const warn = `process.emitWarning('a dependency is deprecated', 'DeprecationWarning', 'DEP0123')`;
    const s = await serve(
      ['--secret-file', secretFile, '--log-level', 'info'],
      ['--import', `data:text/javascript,process.on('SIGUSR2', () => ${encodeURIComponent(warn)})`],
    );
    s.child.kill('SIGUSR2'); // once it serves: where grpc's warning comes, after the log started
    await until(() => s.stderr().includes('DEP0123'), 'the warning', 5_000);
    const warning = s.lines().find((l) => String(l.msg).startsWith('process warning'));
    expect(warning).toMatchObject({
      level: 'warn',
      msg: 'process warning: a dependency is deprecated',
      err: { name: 'DeprecationWarning', code: 'DEP0123' },
    });
    // A secret file that went away: the reload fails, said once (no cause's text appended).
    rmSync(secretFile);
    s.child.kill('SIGHUP');
    await until(() => s.stderr().includes('secret reload failed'), 'the reload failure', 5_000);
    const failed = s.lines().find((l) => l.msg === 'secret reload failed: keeping the previous secret');
    const message = (failed?.err as { message: string }).message;
    expect(message).toBe(`secret file ${secretFile}: ENOENT: no such file or directory`);
    expect(
      s
        .stderr()
        .split('\n')
        .filter((l) => l !== '' && !l.startsWith('{')),
    ).toEqual([]);
  });

  test('--log-level warn leaves out the info lines; a bad level is a usage error', async () => {
    const s = await serve(['--log-level', 'warn']);
    s.child.kill('SIGTERM');
    expect(await s.exit).toBe(0);
    expect(s.stderr()).toBe('');
    const bad = spawn(process.execPath, [CLI, 'serve', '--log-level', 'loud']);
    let stderr = '';
    bad.stderr.on('data', (chunk) => (stderr += chunk));
    const [code] = (await once(bad, 'exit')) as [number];
    expect(code).toBe(64);
    expect(stderr).toMatch(/^ticketing: option '--log-level <level>' argument 'loud' is invalid/);
  });
});
