/** The HTTP endpoint, in process and behind `ticketing serve --http`, and `ticketing inspect`
 * against a real server: routes, status codes, the lock listing and its secret, HTTPS with
 * certificates made by openssl (tls-helpers.ts), bounds, and inspect's output and exit codes. */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, test } from 'vitest';
import { TicketClient } from '../../src/client.js';
import { locksText } from '../../src/inspect.js';
import { CLI, LineSocket, runCli, sleep, until } from '../helpers.js';
import { makePki, type TestPki } from '../tls-helpers.js';
import { request, startObserved, type Observed } from './support.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

async function observed(...args: Parameters<typeof startObserved>): Promise<Observed> {
  const o = await startObserved(...args);
  cleanups.push(() => o.close());
  return o;
}

async function pki(): Promise<TestPki> {
  const made = await makePki();
  cleanups.push(() => made.remove());
  return made;
}

function client(port: number, secret?: string): TicketClient {
  const c = new TicketClient({ port, secret });
  cleanups.push(() => c.close());
  return c;
}

async function acquired(c: TicketClient, key: string, owner?: string): Promise<bigint> {
  const r = await c.acquire(key, { owner });
  if (r.status !== 'acquired') throw new Error(`${key}: ${r.status}`);
  return r.token;
}

const tmp = (): string => mkdtempSync(join(tmpdir(), 'ticketing-http-'));

describe('HTTP endpoint', () => {
  test('healthz, readyz (503 while draining), 404, 405, HEAD', async () => {
    const o = await observed();
    expect(await request(o.httpPort, '/healthz')).toMatchObject({ status: 200, body: 'ok\n' });
    expect(await request(o.httpPort, '/readyz')).toMatchObject({ status: 200, body: 'ok\n' });
    expect((await request(o.httpPort, '/nope')).status).toBe(404);
    const post = await request(o.httpPort, '/metrics', { method: 'POST' });
    expect(post.status).toBe(405);
    expect(post.headers.allow).toBe('GET, HEAD');
    expect(await request(o.httpPort, '/healthz', { method: 'HEAD' })).toMatchObject({ status: 200, body: '' });
    await o.server.close();
    expect(await request(o.httpPort, '/readyz')).toMatchObject({ status: 503, body: 'not ready: shutting down\n' });
    expect((await request(o.httpPort, '/healthz')).status).toBe(200);
  });

  test('/v1/locks: held keys with string tokens, prefix and limit, bad queries 400', async () => {
    const o = await observed({ leaseMs: 60_000 });
    const c = client(o.port);
    const a = await acquired(c, 'orders/1', 'worker-a');
    await acquired(c, 'orders/2', 'worker-b');
    await acquired(c, 'users/1', 'worker-c');
    const waiting = c.acquire('orders/1', { waitMs: 10_000 });
    await until(() => o.server.stats().waiters === 1);
    const all = await request(o.httpPort, '/v1/locks');
    expect(all.status).toBe(200);
    expect(all.headers['content-type']).toBe('application/json');
    const rows = JSON.parse(all.body) as Array<Record<string, unknown>>;
    expect(rows.map((r) => r.key)).toEqual(['orders/1', 'orders/2', 'users/1']);
    expect(rows[0]).toMatchObject({ key: 'orders/1', owner: 'worker-a', token: String(a), waiters: 1 });
    expect(rows[0]!.rev).toBe(String(a)); // a key's first rev is its first grant's token
    const holder = (rows[0]!.holders as Array<Record<string, unknown>>)[0]!;
    expect(holder).toMatchObject({ owner: 'worker-a', token: String(a), mode: 'x' });
    expect('value' in holder).toBe(false);
    // A published value, and the rev it raised.
    const probe = await LineSocket.connect(o.port);
    probe.write(`P orders/1 ${a} 10.0.0.5:8080 zone a\n`);
    expect(await probe.readLine()).toBe(`P ${a} orders/1`);
    probe.destroy();
    const published = (JSON.parse((await request(o.httpPort, '/v1/locks?prefix=orders/1')).body) as typeof rows)[0]!;
    expect(published.rev).toBe(String(a + 1n));
    expect((published.holders as Array<{ value?: string }>)[0]!.value).toBe('10.0.0.5:8080 zone a');
    expect(rows[0]!.expiresInMs).toBeGreaterThan(50_000);
    expect(rows[0]!.expiresInMs).toBeLessThanOrEqual(60_000);
    const orders = JSON.parse((await request(o.httpPort, '/v1/locks?prefix=orders/')).body) as unknown[];
    expect(orders).toHaveLength(2);
    expect(JSON.parse((await request(o.httpPort, '/v1/locks?prefix=orders/&limit=1')).body)).toHaveLength(1);
    for (const query of ['limit=0', 'limit=10001', 'limit=x', 'prefx=a', 'limit=1&limit=2']) {
      const bad = await request(o.httpPort, `/v1/locks?${query}`);
      expect(bad.status, query).toBe(400);
      expect((JSON.parse(bad.body) as { error: string }).error).toBe('bad_request');
    }
    await c.release('orders/1', a);
    expect((await waiting).status).toBe('acquired');
  });

  test('/v1/locks needs the bearer secret when the server has one (probes and metrics do not)', async () => {
    const o = await observed({ secret: 's3cret' });
    const none = await request(o.httpPort, '/v1/locks');
    expect(none.status).toBe(401);
    expect(none.headers['www-authenticate']).toBe('Bearer');
    expect(none.headers['content-type']).toMatch(/^application\/json/);
    expect(JSON.parse(none.body)).toEqual({ error: 'unauthorized' });
    const wrong = await request(o.httpPort, '/v1/locks', { headers: { authorization: 'Bearer s3cre7' } });
    expect(wrong.status).toBe(401);
    const right = await request(o.httpPort, '/v1/locks', { headers: { authorization: 'Bearer s3cret' } });
    expect(right).toMatchObject({ status: 200, body: '[]\n' });
    expect((await request(o.httpPort, '/readyz')).status).toBe(200);
    expect((await request(o.httpPort, '/metrics')).status).toBe(200);
  });

  test('HTTPS with the given certificate; a reload with setTls serves the new one', async () => {
    const [first, second] = [await pki(), await pki()];
    const o = await observed(
      {},
      { tls: { cert: readFileSync(first.server.cert), key: readFileSync(first.server.key) } },
    );
    expect(o.endpoint.secure).toBe(true);
    const trusting = (p: TestPki) => ({ ca: readFileSync(p.ca) });
    expect(await request(o.httpPort, '/healthz', trusting(first))).toMatchObject({ status: 200, body: 'ok\n' });
    await expect(request(o.httpPort, '/healthz', trusting(second))).rejects.toThrow(/unable to verify|self[- ]signed/i);
    o.endpoint.setTls({ cert: readFileSync(second.server.cert), key: readFileSync(second.server.key) });
    expect((await request(o.httpPort, '/healthz', trusting(second))).status).toBe(200);
  });

  test('a request that never finishes is cut off after the request timeout', async () => {
    const o = await observed({}, { requestTimeoutMs: 300 });
    const socket = net.connect(o.httpPort, '127.0.0.1');
    socket.on('error', () => {});
    await once(socket, 'connect');
    let received = '';
    socket.on('data', (chunk: Buffer) => (received += chunk.toString()));
    socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n');
    const closed = once(socket, 'close').then(() => 'closed');
    const late = new Promise((resolve) => setTimeout(resolve, 5_000, 'still open')).then(String);
    expect(await Promise.race([closed, late])).toBe('closed');
    expect(received).toMatch(/^HTTP\/1\.1 408 /);
    socket.destroy();
  });
});

/** `ticketing serve --http 127.0.0.1:0`; the endpoint's port from its `http listening` log line. */
async function serveHttp(args: string[]): Promise<{ child: ChildProcess; port: number; httpPort: number }> {
  const child = spawn(process.execPath, [CLI, 'serve', '--port', '0', '--http', '127.0.0.1:0', ...args]);
  cleanups.push(() => void child.kill('SIGKILL'));
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk) => (stdout += chunk));
  child.stderr.on('data', (chunk) => (stderr += chunk));
  await until(() => stdout.includes('\n') || child.exitCode !== null, 'the listening line', 10_000);
  const port = Number(/^listening 127\.0\.0\.1:(\d+)$/m.exec(stdout)?.[1]);
  const line = stderr.split('\n').find((l) => l.includes('"http listening"'));
  const httpPort = (JSON.parse(line ?? '{}') as { port?: number }).port;
  if (!(port > 0) || httpPort === undefined) throw new Error(`not started: ${stdout} ${stderr}`);
  return { child, port, httpPort };
}

describe('ticketing serve --http and ticketing inspect', () => {
  test('inspect: a table (escaped), --json the endpoint array; exit 0, also when nothing is held', async () => {
    const s = await serveHttp(['--lease', '60s']);
    const address = `127.0.0.1:${s.httpPort}`;
    expect(await runCli(['inspect', '--http', address])).toEqual({ code: 0, stdout: 'No locks held.\n', stderr: '' });
    const c = client(s.port);
    const token = await acquired(c, 'orders', 'back\\slash');
    await acquired(c, 'users', 'w2');
    const table = await runCli(['inspect', '--http', address]);
    expect(table.code).toBe(0);
    const lines = table.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^KEY +KIND +MODE +OWNER +TOKEN +EXPIRES +WAITERS$/);
    // A 60 s lease, some of it gone by the time inspect asks (seconds on a loaded machine).
    expect(lines[1]).toMatch(new RegExp(`^orders +lock +x +back\\\\\\\\slash +${token} +in (1m00s|[1-5]?\\ds) +0$`));
    expect(lines).toHaveLength(3);
    const json = await runCli(['inspect', '--http', address, '--json', '--prefix', 'ord']);
    expect(json.code).toBe(0);
    const listed = JSON.parse(json.stdout) as Array<Record<string, unknown>>;
    expect(listed).toHaveLength(1);
    expect(listed[0]).toMatchObject({ key: 'orders', owner: 'back\\slash', token: String(token), waiters: 0 });
    expect(listed[0]!.expiresInMs).toBeGreaterThan(50_000);
    expect((await runCli(['inspect', '--http', address, '--prefix', 'zz'])).stdout).toBe('No locks held under "zz".\n');
    // /metrics behind the CLI too.
    expect((await request(s.httpPort, '/metrics')).body).toMatch(
      /^ticketing_requests_total\{op="acquire",result="acquired"\} 2$/m,
    );
  });

  test('inspect --tls-ca against a plain HTTP endpoint: told to drop --tls-ca', async () => {
    const s = await serveHttp([]);
    const [ca] = [await pki()];
    const r = await runCli(['inspect', '--http', `127.0.0.1:${s.httpPort}`, '--tls-ca', ca.ca]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/the endpoint speaks plain HTTP, not HTTPS: drop --tls-ca\n$/);
  });

  test('inspect with a secret: refused without it (exit 1), served with it', async () => {
    const dir = tmp();
    const secretFile = join(dir, 'secret');
    writeFileSync(secretFile, 'inspect-s3cret\n');
    const s = await serveHttp(['--secret-file', secretFile]);
    const address = `127.0.0.1:${s.httpPort}`;
    const refused = await runCli(['inspect', '--http', address]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/^ticketing: the server wants its secret: --secret-file/);
    const served = await runCli(['inspect', '--http', address, '--secret-file', secretFile, '--json']);
    expect(served).toEqual({ code: 0, stdout: '[]\n', stderr: '' });
  });

  test('with --tls-cert the endpoint serves HTTPS (no client certificate needed under mutual TLS); SIGHUP reloads it; inspect --tls-ca', async () => {
    const [first, second] = [await pki(), await pki()];
    const cert = join(first.dir, 'live.crt');
    const key = join(first.dir, 'live.key');
    copyFileSync(first.server.cert, cert);
    copyFileSync(first.server.key, key);
    const s = await serveHttp(['--tls-cert', cert, '--tls-key', key, '--tls-ca', first.ca]);
    expect((await request(s.httpPort, '/readyz', { ca: readFileSync(first.ca) })).status).toBe(200);
    const address = `127.0.0.1:${s.httpPort}`;
    expect(await runCli(['inspect', '--http', address, '--tls-ca', first.ca])).toEqual({
      code: 0,
      stdout: 'No locks held.\n',
      stderr: '',
    });
    // Plain HTTP to an HTTPS port: told so, and which flag to pass.
    const plain = await runCli(['inspect', '--http', address]);
    expect(plain.code).toBe(1);
    expect(plain.stderr).toBe(
      `ticketing: http://${address}: the endpoint speaks HTTPS: pass --tls-ca <the CA certificate file> (or --tls-ca system)\n`,
    );
    // --tls-ca system: Node's default CAs (a test CA only through NODE_EXTRA_CA_CERTS, which they include).
    expect((await runCli(['inspect', '--http', address, '--tls-ca', 'system'])).stderr).toMatch(/certificate/);
    process.env.NODE_EXTRA_CA_CERTS = first.ca;
    try {
      expect((await runCli(['inspect', '--http', address, '--tls-ca', 'system'])).code).toBe(0);
    } finally {
      delete process.env.NODE_EXTRA_CA_CERTS;
    }
    copyFileSync(second.server.cert, cert);
    copyFileSync(second.server.key, key);
    s.child.kill('SIGHUP');
    const trusted = (): Promise<boolean> =>
      request(s.httpPort, '/healthz', { ca: readFileSync(second.ca) }).then(
        (answer) => answer.status === 200,
        () => false,
      );
    const deadline = Date.now() + 5_000;
    while (!(await trusted())) {
      if (Date.now() > deadline) throw new Error('the reloaded certificate was not served');
      await sleep(20);
    }
    expect((await runCli(['inspect', '--http', address, '--tls-ca', second.ca])).code).toBe(0);
  });

  test('bad input: a bad --http address (serve and inspect) exits 64; an unreachable endpoint exits 1', async () => {
    for (const args of [
      ['serve', '--http', 'nonsense'],
      ['serve', '--http', '127.0.0.1:70000'],
      ['inspect', '--http', 'nonsense'],
      ['inspect'],
      ['inspect', '--http', '127.0.0.1:1', '--limit', '0'],
    ]) {
      const r = await runCli(args);
      expect(r.code, args.join(' ')).toBe(64);
      expect(r.stdout).toBe('');
      expect(r.stderr).toMatch(/^ticketing: /);
    }
    const probe = net.createServer().listen(0, '127.0.0.1');
    await once(probe, 'listening');
    const { port } = probe.address() as net.AddressInfo;
    await new Promise((resolve) => probe.close(resolve));
    const unreachable = await runCli(['inspect', '--http', `127.0.0.1:${port}`]);
    expect(unreachable.code).toBe(1);
    expect(unreachable.stderr).toMatch(/ECONNREFUSED/);
  });
});

test('inspect shows every holder of a semaphore or shared key, its slot or mode, and waiters by mode', () => {
  const text = locksText(
    [
      {
        key: 'gpu',
        kind: 'semaphore',
        permits: 2,
        owner: 'b',
        token: '8',
        expiresInMs: 5_000,
        holders: [
          { owner: 'a', token: '7', mode: 'permit', slot: 0, expiresInMs: 4_000 },
          { owner: 'b', token: '8', mode: 'permit', slot: 1, expiresInMs: 5_000 },
        ],
        waiters: 3,
        waitersByMode: { 2: 3 },
      },
    ],
    undefined,
    100,
  );
  const lines = text.trimEnd().split('\n');
  expect(lines[1]).toMatch(/^gpu +2 permits +slot 0 +a +7 +in 4s +3 \(3 2\)$/);
  expect(lines[2]).toMatch(/^ +slot 1 +b +8 +in 5s *$/);
});
