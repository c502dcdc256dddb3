/**
 * `ticketing run` as a real process against a real `ticketing serve`: the exit status, --wait
 * running out, forwarded signals, a `kill -9` of run, and the loss test (a proxy blackholes the
 * holder's traffic mid-hold; its command, which ignores SIGTERM, must stop writing heartbeats
 * before the next holder's command writes its first).
 */

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, test } from 'vitest';
import { TicketClient } from '../src/client.js';
import { startTcpProxy } from './cluster/harness.mjs';
import { sleep, spawnServer, until } from './helpers.js';
import { beats, heartbeat, heartbeatGap, runTicketing, type Run } from './run-helpers.js';
import { makePki } from './tls-helpers.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

async function serve(lease: string, ...args: string[]): Promise<string> {
  const s = await spawnServer(['--lease', lease, ...args]);
  cleanups.push(async () => {
    s.child.kill('SIGKILL');
    await s.exit;
  });
  return `127.0.0.1:${s.port}`;
}

function run(address: string, args: string[], command: string): Run {
  return runTicketing(address, args, command, cleanups);
}

function dir(): string {
  return mkdtempSync(join(tmpdir(), 'ticketing-run-'));
}

function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('ticketing run', () => {
  test('--permits N gives the command TICKETING_SLOT; --shared holds beside other shared holders', async () => {
    const address = await serve('60s'); // the client's grants outlast the slow spawns
    const d = dir();
    const client = new TicketClient({ addresses: [address] });
    cleanups.push(() => client.destroy());
    expect(await client.acquire('pool', { permits: 2 })).toMatchObject({ slot: 0 });
    const r = run(address, ['--key', 'pool', '--permits', '2'], `echo "$TICKETING_SLOT" > ${d}/slot`);
    expect(await r.exit).toEqual({ code: 0, signal: null });
    expect(readFileSync(join(d, 'slot'), 'latin1').trim()).toBe('1');
    expect(await client.acquire('doc', { shared: true })).toMatchObject({ status: 'acquired' });
    const shared = run(address, ['--key', 'doc', '--shared'], `echo "[$TICKETING_SLOT]" > ${d}/shared`);
    expect(await shared.exit).toEqual({ code: 0, signal: null });
    expect(readFileSync(join(d, 'shared'), 'latin1').trim()).toBe('[]');
    const conflict = run(address, ['--key', 'doc', '--permits', '2'], `touch ${d}/ran`);
    expect(await conflict.exit).toEqual({ code: 1, signal: null });
    expect(existsSync(join(d, 'ran'))).toBe(false);
    const usage = run(address, ['--key', 'doc', '--permits', '2', '--shared'], 'true');
    expect((await usage.exit).code).toBe(64);
  });

  test('passes TICKETING_KEY and TICKETING_TOKEN, releases at the end, and exits with the command status', async () => {
    const address = await serve('2s');
    const d = dir();
    const r = run(address, ['--key', 'job'], `echo "$TICKETING_KEY $TICKETING_TOKEN" > ${d}/env; exit 3`);
    expect(await r.exit).toEqual({ code: 3, signal: null });
    const [key, token] = readFileSync(join(d, 'env'), 'latin1').trim().split(' ');
    expect(key).toBe('job');
    expect(BigInt(token!)).toBeGreaterThan(0n);
    // Released: the key is free at once, not after the lease.
    const client = new TicketClient({ addresses: [address] });
    cleanups.push(() => client.destroy());
    expect((await client.acquire('job')).status).toBe('acquired');
  });

  test('over mutual TLS with --tls-ca, --tls-cert and --tls-key; without a client certificate, exit 1 and no run', async () => {
    const pki = await makePki();
    cleanups.push(() => pki.remove());
    const address = await serve('2s', '--tls-cert', pki.server.cert, '--tls-key', pki.server.key, '--tls-ca', pki.ca);
    const d = dir();
    const tls = ['--tls-ca', pki.ca, '--tls-cert', pki.client.cert, '--tls-key', pki.client.key];
    const r = run(address, ['--key', 'job', ...tls], `echo "$TICKETING_TOKEN" > ${d}/token`);
    expect(await r.exit).toEqual({ code: 0, signal: null });
    expect(BigInt(readFileSync(join(d, 'token'), 'latin1').trim())).toBeGreaterThan(0n);
    const refused = run(address, ['--key', 'job', '--tls-ca', pki.ca], `touch ${d}/ran`);
    expect(await refused.exit).toEqual({ code: 1, signal: null });
    expect(refused.stderr()).toMatch(/certificate/i);
    expect(existsSync(join(d, 'ran'))).toBe(false);
    const usage = run(address, ['--key', 'job', '--tls-cert', pki.client.cert], 'true');
    expect((await usage.exit).code).toBe(64);
  });

  test('--wait running out exits 75 (as flocklease run does for a held lease)', async () => {
    const address = await serve('60s'); // held however long starting run takes
    const client = new TicketClient({ addresses: [address] });
    cleanups.push(() => client.destroy());
    expect((await client.acquire('job')).status).toBe('acquired');
    const r = run(address, ['--key', 'job', '--wait', '200ms'], 'exit 0');
    expect(await r.exit).toEqual({ code: 75, signal: null });
    expect(r.stderr()).toMatch(/not obtained within 200 ms: it is held by another owner/);
  });

  test('--wait forever waits as long as the key is held (as flocklease run --wait forever does)', async () => {
    const address = await serve('1s');
    const client = new TicketClient({ addresses: [address] });
    cleanups.push(() => client.destroy());
    // Held and never kept: the key is free only when its lease runs out, a second from now.
    expect((await client.acquire('job')).status).toBe('acquired');
    const heldAt = Date.now();
    const d = dir();
    const r = run(address, ['--key', 'job', '--wait', 'forever'], `touch ${d}/ran`);
    expect(await r.exit, r.stderr()).toEqual({ code: 0, signal: null });
    expect(existsSync(join(d, 'ran'))).toBe(true);
    expect(Date.now() - heldAt).toBeGreaterThanOrEqual(900);
  });

  test('--wait takes a duration or forever; anything else is a usage error (exit 64)', async () => {
    const r = run('127.0.0.1:1', ['--key', 'job', '--wait', 'forevr'], 'exit 0');
    expect(await r.exit).toEqual({ code: 64, signal: null });
    expect(r.stderr()).toMatch(/option '--wait <dur>' argument 'forevr' is invalid\. invalid duration "forevr"/);
  });

  test('without the flocklease package: RunUnsupportedError, exit 1, before asking for the lock', async () => {
    // The built package in a folder of its own, its dependencies linked beside it, flocklease not.
    const installed = dir();
    const pkg = fileURLToPath(new URL('..', import.meta.url));
    const repo = fileURLToPath(new URL('../..', import.meta.url));
    cpSync(join(pkg, 'dist'), join(installed, 'dist'), { recursive: true });
    cpSync(join(pkg, 'package.json'), join(installed, 'package.json'));
    mkdirSync(join(installed, 'node_modules'));
    for (const name of readdirSync(join(repo, 'node_modules')))
      if (name !== 'flocklease') symlinkSync(join(repo, 'node_modules', name), join(installed, 'node_modules', name));
    const d = dir();
    // Nothing listens on port 1: were the lock asked for first, the error would be a connect error.
    const child = spawn(
      process.execPath,
      [
        join(installed, 'dist', 'cli.js'),
        'run',
        '--addresses',
        '127.0.0.1:1',
        '--key',
        'job',
        '--',
        'touch',
        join(d, 'ran'),
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    child.stderr.on('data', (chunk) => (stderr += chunk));
    const [code] = (await once(child, 'exit')) as [number | null];
    expect(code).toBe(1);
    expect(stderr).toMatch(/ticketing run needs the flocklease package .*npm i flocklease/);
    expect(existsSync(join(d, 'ran'))).toBe(false);
  });

  test.each(['SIGTERM', 'SIGINT'] as const)('%s sent to run is forwarded to the command', async (sig) => {
    const address = await serve('2s');
    const d = dir();
    const r = run(address, ['--key', 'job'], `trap 'exit 42' INT TERM; touch ${d}/up; while :; do sleep 0.01; done`);
    await until(() => existsSync(join(d, 'up')), 'the command to start', 10_000);
    r.child.kill(sig);
    expect(await r.exit).toEqual({ code: 42, signal: null });
  });

  test('kill -9 of run leaves no member of the command group alive', async () => {
    const address = await serve('2s');
    const d = dir();
    const r = run(address, ['--key', 'job'], `sleep 60 & echo $(ps -o pgid= $$) > ${d}/pgid; wait`);
    await until(
      () => existsSync(join(d, 'pgid')) && readFileSync(join(d, 'pgid'), 'latin1').trim() !== '',
      'the pgid file',
      10_000,
    );
    const pgid = Number(readFileSync(join(d, 'pgid'), 'latin1').trim());
    expect(groupAlive(pgid)).toBe(true);
    r.child.kill('SIGKILL');
    await r.exit;
    await until(() => !groupAlive(pgid), 'the group to be gone', 5_000);
  });

  test('the loss test: a blackholed holder stops (SIGKILL, it ignores SIGTERM) before the next holder starts', async () => {
    const lease = 1_500;
    const address = await serve(`${lease}ms`);
    const [host, port] = [address.split(':')[0]!, Number(address.split(':')[1])];
    const proxy = await startTcpProxy(host, port);
    cleanups.push(() => proxy.close());
    const d = dir();
    const first = run(proxy.address, ['--key', 'job'], heartbeat(join(d, 'first'), true));
    await until(() => beats(join(d, 'first')).length > 5, 'the first command to beat', 10_000);
    await sleep(lease / 2);
    await proxy.cut({ mode: 'blackhole', existing: 'stall' });
    const second = run(address, ['--key', 'job', '--wait', '30s'], heartbeat(join(d, 'second'), false));
    await until(() => beats(join(d, 'second')).length > 0, 'the second command to beat', 15_000);
    expect(heartbeatGap(join(d, 'first'), join(d, 'second'), 'single mode')).toBeGreaterThan(0);
    expect(first.stderr()).toMatch(/terminating the command/);
    expect(await first.exit).toEqual({ code: 79, signal: null });
    second.child.kill('SIGTERM');
    await second.exit;
  });
});
