/** `ticketing serve` as a real process: the listening line, every pinned flag, signals, the
 * secret file, the state file, flag errors, and the memory cost of idle connections. */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, test } from 'vitest';
import { TicketClient } from '../src/client.js';
import { CLI, LineSocket, runCli, sleep, spawnServer, tokenOf } from './helpers.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

async function serve(args: string[] = []): Promise<Awaited<ReturnType<typeof spawnServer>>> {
  const started = await spawnServer(args);
  cleanups.push(async () => {
    if (started.child.exitCode === null && started.child.signalCode === null) {
      started.child.kill('SIGKILL');
      await started.exit;
    }
  });
  return started;
}

async function connect(port: number): Promise<LineSocket> {
  const socket = await LineSocket.connect(port);
  cleanups.push(() => socket.destroy());
  return socket;
}

describe('ticketing serve', () => {
  test('prints one "listening <host>:<port>" line, serves, and drains on SIGTERM (exit 0)', async () => {
    const s = await serve();
    expect(s.host).toBe('127.0.0.1');
    expect(s.port).toBeGreaterThan(0);
    const holder = await connect(s.port);
    const waiter = await connect(s.port);
    holder.write('A k h 0\n');
    expect(await holder.readLine()).toMatch(/^A \d+ h k$/);
    waiter.write('A k w 60000\n');
    await sleep(50);
    s.child.kill('SIGTERM');
    expect(await waiter.readLines(2)).toEqual(['T w k', 'E not_active shutting down']);
    expect(await s.exit).toEqual({ code: 0, signal: null });
    expect(
      s
        .stderr()
        .split('\n')
        .filter(Boolean)
        .map((line) => (JSON.parse(line) as { level: string }).level),
    ).not.toContain('error');
  });

  test('a SIGTERM sent the instant the listening line is read still drains (exit 0, not killed)', async () => {
    for (let i = 0; i < 5; i++) {
      const child = spawn(process.execPath, [CLI, 'serve', '--port', '0']);
      cleanups.push(() => void child.kill('SIGKILL'));
      const exit = new Promise<[number | null, string | null]>((resolve) =>
        child.on('exit', (code, signal) => resolve([code, signal])),
      );
      child.stdout.once('data', () => child.kill('SIGTERM'));
      expect(await exit).toEqual([0, null]);
    }
  });

  test('SIGINT drains and exits 0 too', async () => {
    const s = await serve();
    const c = await connect(s.port);
    c.write('A k o 0\n');
    await c.readLine();
    s.child.kill('SIGINT');
    expect(await c.readLine()).toBe('E not_active shutting down');
    expect((await s.exit).code).toBe(0);
  });

  test('--host and --port', async () => {
    const probe = net.createServer().listen(0, '127.0.0.1');
    await once(probe, 'listening');
    const { port } = probe.address() as net.AddressInfo;
    await new Promise((resolve) => probe.close(resolve));
    const s = await serve(['--host', '127.0.0.1', '--port', String(port)]);
    expect([s.host, s.port]).toEqual(['127.0.0.1', port]);
  });

  test('an IPv6 host prints as [addr]:port, and a client reaches it', async () => {
    const s = await serve(['--host', '::1']);
    expect(s.host).toBe('[::1]');
    const c = await LineSocket.connect(s.port, '::1');
    cleanups.push(() => c.destroy());
    c.write('A k o 0\n');
    expect(await c.readLine()).toMatch(/^A \d+ o k$/);
    const client = new TicketClient({ host: '::1', port: s.port });
    cleanups.push(() => client.destroy());
    expect((await client.acquire('k6', { waitMs: 0 })).status).toBe('acquired');
  });

  test('--lease: a key held past it goes to the waiter', async () => {
    const s = await serve(['--lease', '200ms']);
    const c = await connect(s.port);
    const started = Date.now();
    c.write('A k h 0\nA k w 10000\n');
    const [first, second] = await c.readLines(2);
    expect(second).toMatch(/^A \d+ w k$/);
    expect(tokenOf(second!) > tokenOf(first!)).toBe(true);
    expect(Date.now() - started).toBeGreaterThanOrEqual(180);
  });

  test('--max-waiters-per-key, --max-waiters, --max-keys answer B', async () => {
    const s = await serve(['--max-waiters-per-key', '1', '--max-waiters', '2', '--max-keys', '3']);
    const c = await connect(s.port);
    c.write('A a h 0\nA b h 0\nA c h 0\n');
    await c.readLines(3);
    c.write('A a w1 60000\nA a w2 60000\nA b w3 60000\nA c w4 60000\nA d h 0\n');
    expect(await c.readLines(3)).toEqual(['B w2 a', 'B w4 c', 'B h d']);
  });

  test('--max-connections answers E capacity', async () => {
    const s = await serve(['--max-connections', '1']);
    await connect(s.port);
    const over = await connect(s.port);
    expect(await over.readLine()).toBe('E capacity too many connections');
    await over.waitClosed();
  });

  test('--max-line (default 1024, counting the terminator)', async () => {
    const s = await serve(['--max-line', '100']);
    const c = await connect(s.port);
    c.write(`A ${'k'.repeat(120)} o 0\n`);
    expect(await c.readLine()).toBe('E too_long line exceeds 100 bytes');
    const d = await serve();
    const ok = await connect(d.port);
    const key = 'k'.repeat(256);
    const owner = 'o'.repeat(256);
    ok.write(`A ${key} ${owner} 0\n`); // 520 bytes: fine under 1024
    expect(await ok.readLine()).toMatch(/^A \d+ o+ k+$/);
    ok.write(`A ${key} ${owner} ${'1'.repeat(600)}\n`);
    expect(await ok.readLine()).toMatch(/^E too_long/);
  });

  test('--secret-file: the secret comes from the file only (never argv)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ticketing-cli-'));
    const file = join(dir, 'secret');
    writeFileSync(file, 'c0rrect-h0rse\n');
    chmodSync(file, 0o600);
    const s = await serve(['--secret-file', file]);
    const cmdline = readFileSync(`/proc/${s.child.pid}/cmdline`, 'utf8');
    expect(cmdline).not.toContain('c0rrect-h0rse');
    const good = await connect(s.port);
    good.write('H c0rrect-h0rse\nA k o 0\n');
    expect(await good.readLine()).toMatch(/^A \d+ o k$/);
    const bad = await connect(s.port);
    bad.write('H c0rrect-h0rse\n'.replace('0', 'o') + 'A k2 o 0\n');
    expect(await bad.readLine()).toBe('E auth_failed');
    const none = await connect(s.port);
    none.write('A k3 o 0\n');
    expect(await none.readLine()).toBe('E auth_failed');
    // There is no flag that takes the secret itself.
    const { code, stderr } = await runCli(['serve', '--port', '0', '--secret', 'c0rrect-h0rse']);
    expect(code).toBe(64);
    expect(stderr).toMatch(/unknown option/);
  });

  test('--state-file: a restart continues above the recorded high-water mark', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ticketing-cli-'));
    const stateFile = join(dir, 'tokens.json');
    const first = await serve(['--state-file', stateFile]);
    const c = await connect(first.port);
    c.write('A k o 0\n');
    const issued = tokenOf(await c.readLine());
    first.child.kill('SIGTERM');
    await first.exit;
    const mark = BigInt((JSON.parse(readFileSync(stateFile, 'utf8')) as { highWater: string }).highWater);
    expect(mark >= issued).toBe(true);
    const second = await serve(['--state-file', stateFile]);
    const d = await connect(second.port);
    d.write('A k o 0\n');
    expect(tokenOf(await d.readLine()) > mark).toBe(true);
  });

  test.each([
    [['serve', '--port', 'abc'], /--port/],
    [['serve', '--port', '70000'], /--port/],
    [['serve', '--lease', '0s'], /--lease/],
    [['serve', '--lease', 'soon'], /--lease/],
    [['serve', '--max-line', '10'], /--max-line/],
    [['serve', '--max-keys', '0'], /--max-keys/],
    [['serve', '--idle-timeout', '0s'], /--idle-timeout/],
    [['serve', '--line-timeout', 'never'], /--line-timeout/],
    [['serve', '--bogus'], /unknown option/],
    [['bogus'], /unknown command/],
    [['serve', '--etcd-user', 'u'], /--etcd-user needs --cluster/],
    [['serve', '--cluster', '--advertise', '127.0.0.1:1', '--etcd', 'http://a:1,https://b:2'], /not a mix/],
    [
      ['serve', '--cluster', '--advertise', '127.0.0.1:1', '--etcd', 'http://a:1', '--etcd-ca', 'ca.pem'],
      /--etcd-ca needs https/,
    ],
    [
      ['serve', '--cluster', '--advertise', '127.0.0.1:1', '--etcd', 'https://a:1', '--etcd-cert', 'c.pem'],
      /--etcd-cert and --etcd-key go together/,
    ],
    [
      ['serve', '--cluster', '--advertise', '127.0.0.1:1', '--etcd', 'https://a:1', '--etcd-user', 'u'],
      /--etcd-user needs --etcd-password-file/,
    ],
    [
      ['serve', '--cluster', '--advertise', '127.0.0.1:1', '--etcd', 'http://a:1', '--etcd-password-file', 'p'],
      /--etcd-password-file needs --etcd-user/,
    ],
  ])('a usage error %j: "ticketing: …" on stderr and exit 64', async (args, message) => {
    const { code, stdout, stderr } = await runCli(args);
    expect(code).toBe(64);
    expect(stdout).toBe('');
    expect(stderr).toMatch(/^ticketing: /);
    expect(stderr).toMatch(message);
  });

  test('an unreadable etcd file: an error naming it, exit 1 before listening', async () => {
    const args = [
      'serve',
      '--cluster',
      '--advertise',
      '127.0.0.1:1',
      '--etcd',
      'https://127.0.0.1:1',
      '--etcd-ca',
      '/nonexistent/ca.pem',
    ];
    const { code, stdout, stderr } = await runCli(args);
    expect(code).toBe(1);
    expect(stdout).toBe('');
    expect(stderr).toMatch(/^ticketing: etcd CA file \/nonexistent\/ca.pem: ENOENT/);
  });

  test.each([
    ['/nonexistent/secret', /^ticketing: secret file \/nonexistent\/secret: ENOENT/],
    ['<dir>', /^ticketing: secret file \/\S+: is a directory \(EISDIR\)/],
  ])('--secret-file %s: an error naming the path, exit 1', async (path, message) => {
    const file = path === '<dir>' ? mkdtempSync(join(tmpdir(), 'ticketing-secret-dir-')) : path;
    const { code, stdout, stderr } = await runCli(['serve', '--port', '0', '--secret-file', file]);
    expect(code).toBe(1);
    expect(stdout).toBe('');
    expect(stderr).toMatch(message);
    expect(stderr).toContain(file);
  });

  test('--version prints the package version; help shows durations in their units', async () => {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
    const v = await runCli(['--version']);
    expect(v).toEqual({ code: 0, stdout: `${pkg.version}\n`, stderr: '' });
    const help = await runCli(['serve', '--help']);
    expect(help.code).toBe(0);
    const flat = help.stdout.replace(/\s+/g, ' ');
    for (const [flag, shown] of [
      ['--lease', '30s'],
      ['--write-timeout', '30s'],
      ['--idle-timeout', '30s'],
      ['--line-timeout', '10s'],
    ]) {
      expect(flat).toMatch(new RegExp(`${flag} <dur> [^-]*\\(default: ${shown}\\)`));
    }
    expect(flat).not.toMatch(/<dur> [^-]*\(default: \d+\)/); // no bare milliseconds
  });

  test('--idle-timeout and --line-timeout reach the server', async () => {
    const s = await serve(['--idle-timeout', '300ms', '--line-timeout', '200ms']);
    const idle = await connect(s.port);
    const half = await connect(s.port);
    half.write('A k');
    expect(await half.readLine()).toBe('E bad_request no end of line within 200 ms');
    await idle.waitClosed(5_000);
    expect(idle.received.length).toBe(0);
  });

  test('a port already in use: an error and a non-zero exit, no listening line', async () => {
    const s = await serve();
    const { code, stdout, stderr } = await runCli(['serve', '--port', String(s.port)]);
    expect(code).not.toBe(0);
    expect(stdout).toBe('');
    expect(stderr).toMatch(/EADDRINUSE/);
  });

  test('thousands of idle connections cost little memory', { timeout: 60_000 }, async () => {
    const s = await serve(['--idle-timeout', '10m']); // kept open however slow the machine is
    const rss = (): number =>
      Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${s.child.pid}/status`, 'utf8'))![1]) * 1024;
    const probe = await connect(s.port);
    probe.write('A warm o 0\n');
    await probe.readLine();
    await sleep(200);
    const before = rss();
    const count = 2_000;
    const sockets: net.Socket[] = [];
    cleanups.push(() => sockets.forEach((socket) => socket.destroy()));
    for (let i = 0; i < count; i++) {
      const socket = net.connect(s.port, '127.0.0.1');
      socket.on('error', () => {});
      sockets.push(socket);
      if (i % 200 === 199) await once(socket, 'connect');
    }
    await Promise.all(sockets.filter((socket) => socket.connecting).map((socket) => once(socket, 'connect')));
    // The server has accepted them all once it answers on a connection made after them.
    const last = await connect(s.port);
    last.write('A probe o 0\n');
    expect(await last.readLine()).toMatch(/^A \d+ o probe$/);
    await sleep(300);
    const perConnection = (rss() - before) / count;
    // Measured ≈ 4-6 KB; the bound only guards the order of magnitude.
    expect(perConnection).toBeLessThan(32 * 1024);
  });
});
