/**
 * Access control (issue 56, docs/ticketing-access.md) on real sockets, with real certificates from
 * the test CA: identities by client-certificate CN or by secret, key-prefix rules answered `F`
 * with nothing changed, a read-only identity, quotas across two connections of one identity,
 * refused credentials, replacing the rules while connections are open, `/v1/locks` filtered per
 * identity, and the rules themselves (parsing, prefix matching).
 */
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import https from 'node:https';
import tls from 'node:tls';
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import { TicketClient } from '../src/client.js';
import { AuthFailedError, ForbiddenError } from '../src/errors.js';
import { channels } from '../src/events.js';
import { parseReply } from '../src/protocol.js';
import { HttpEndpoint } from '../src/observe/http.js';
import { createLogger, ServerLog } from '../src/observe/log.js';
import { TicketMetrics } from '../src/observe/metrics.js';
import { AccessFileError, AccessRules } from '../src/server/access.js';
import { TicketServer } from '../src/server/server.js';
import { TlsMaterial } from '../src/server/tls-material.js';
import { createCa } from './certs.mjs';
import { LineSocket, runCli, spawnServer, tokenOf, until } from './helpers.js';
import { clientTls, makePki, type CertFiles, type TestPki } from './tls-helpers.js';

const pki: TestPki = await makePki();
const ca = await createCa({ dir: pki.dir, name: 'acl-ca', commonName: 'flocklease ACL test CA', days: 30 });
const issued = async (cn: string): Promise<CertFiles> => {
  const cert = await ca.issue({ name: cn, usage: ['clientAuth'], days: 30 });
  return { cert: cert.certFile, key: cert.keyFile };
};
// Every certificate below is signed by `ca`; the server trusts it and its own server certificate.
const billingCert = await issued('billing-worker');
const opsCert = await issued('ops-console');
const strangerCert = await issued('stranger');
const serverCert = await ca.issue({ name: 'acl-server', hosts: ['127.0.0.1'], usage: ['serverAuth'], days: 30 });
afterAll(() => rmSync(pki.dir, { recursive: true, force: true }));

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

const sha256 = (secret: string): string => createHash('sha256').update(secret).digest('hex');

interface IdentityFile {
  name: string;
  secretSha256?: string;
  cn?: string;
  allow: Array<{ prefix: string; verbs: string[] }>;
  maxHeld?: number;
  maxWaiting?: number;
}

const BILLING: IdentityFile = {
  name: 'billing',
  cn: 'billing-worker',
  secretSha256: sha256('billing-secret'),
  allow: [{ prefix: 'billing/', verbs: ['lock', 'observe'] }],
};
const ORDERS: IdentityFile = {
  name: 'orders',
  secretSha256: sha256('orders-secret'),
  allow: [{ prefix: 'orders/', verbs: ['lock', 'read'] }],
};
const OPS: IdentityFile = { name: 'ops', cn: 'ops-console', allow: [{ prefix: '', verbs: ['read'] }] };

const rules = (...identities: IdentityFile[]): AccessRules => AccessRules.parse(JSON.stringify({ identities }));

async function aclServer(access: AccessRules, mutual = false): Promise<{ server: TicketServer; port: number }> {
  const material = mutual
    ? TlsMaterial.load({ cert: serverCert.certFile, key: serverCert.keyFile, ca: ca.certFile })
    : undefined;
  const server = new TicketServer({ port: 0, access, tls: material });
  const { port } = await server.listen();
  cleanups.push(() => server.close());
  return { server, port };
}

const tlsTo = (cert?: CertFiles): tls.ConnectionOptions => ({ ...clientTls(pki, cert), ca: ca.cert });

async function lines(port: number, cert?: CertFiles): Promise<LineSocket> {
  const socket = cert === undefined ? undefined : tls.connect({ port, host: '127.0.0.1', ...tlsTo(cert) });
  const conn = socket === undefined ? await LineSocket.connect(port) : new LineSocket(socket);
  if (socket !== undefined) await once(socket, 'secureConnect');
  cleanups.push(() => conn.destroy());
  return conn;
}

/** Every client connection closed from now on (`ticketing:client:close`), until the test ends. */
function clientCloses(): unknown[] {
  const closes: unknown[] = [];
  const onClose = (message: unknown): number => closes.push(message);
  channels.clientClose.subscribe(onClose);
  cleanups.push(() => void channels.clientClose.unsubscribe(onClose));
  return closes;
}

function client(port: number, options: { secret?: string; cert?: CertFiles } = {}): TicketClient {
  const c = new TicketClient({
    port,
    secret: options.secret,
    tls: options.cert === undefined ? undefined : tlsTo(options.cert),
    connectTimeoutMs: 2_000,
  });
  cleanups.push(() => c.destroy());
  return c;
}

describe('two tenants on disjoint prefixes', () => {
  test('each uses its own keys; every refusal is F, changes nothing, and the connection stays open', async () => {
    const { server, port } = await aclServer(rules(BILLING, ORDERS), true);
    // billing by its certificate's CN (no H); orders by its secret, over a certificate that names
    // no identity (mutual TLS asks every client for one).
    const billing = await lines(port, billingCert);
    const ordersTls = await lines(port, strangerCert);
    ordersTls.write('H orders-secret\n');

    billing.write('A billing/invoice b1 0\n');
    const billingToken = tokenOf(await billing.readLine());
    ordersTls.write('A orders/42 o1 0\n');
    const ordersToken = tokenOf(await ordersTls.readLine());

    // Across the boundary, each way: acquire, release, keep.
    billing.write(`A orders/42 b2 0\nR orders/42 ${ordersToken}\nK orders/42 ${ordersToken}\n`);
    expect(await billing.readLines(3)).toEqual([
      'F b2 orders/42',
      `F ${ordersToken} orders/42`,
      `F ${ordersToken} orders/42`,
    ]);
    ordersTls.write(`A billing/invoice o2 5000\nR billing/invoice ${billingToken}\n`);
    expect(await ordersTls.readLines(2)).toEqual(['F o2 billing/invoice', `F ${billingToken} billing/invoice`]);
    // Nothing changed: each key has its holder and no waiter.
    expect(server.inspect('orders/42')).toMatchObject({ token: ordersToken, waiters: [] });
    expect(server.inspect('billing/invoice')).toMatchObject({ token: billingToken, waiters: [] });
    // Both connections still serve their own keys.
    billing.write(`R billing/invoice ${billingToken}\n`);
    expect(await billing.readLine()).toBe(`R ${billingToken} billing/invoice`);
    ordersTls.write(`R orders/42 ${ordersToken}\n`);
    expect(await ordersTls.readLine()).toBe(`R ${ordersToken} orders/42`);
    expect(billing.closed || ordersTls.closed).toBe(false);
  });

  test('TicketClient rejects a refusal with ForbiddenError (ETICKETFORBIDDEN), not Indeterminate, and goes on', async () => {
    const { server, port } = await aclServer(rules(BILLING, ORDERS));
    const closes = clientCloses();
    const orders = client(port, { secret: 'orders-secret' });
    const billing = client(port, { secret: 'billing-secret' });
    const held = await orders.acquire('orders/1', { waitMs: 0 });
    if (held.status !== 'acquired') throw new Error(held.status);

    const acquire = (await billing.acquire('orders/1', { waitMs: 1_000 }).catch((e: unknown) => e)) as ForbiddenError;
    expect(acquire).toBeInstanceOf(ForbiddenError);
    expect(acquire.code).toBe('ETICKETFORBIDDEN');
    expect(acquire.key).toBe('orders/1');
    const release = (await billing.release('orders/1', held.token).catch((e: unknown) => e)) as ForbiddenError;
    expect(release.code).toBe('ETICKETFORBIDDEN');
    const keep = (await billing.renew('orders/1', held.token).catch((e: unknown) => e)) as ForbiddenError;
    expect(keep.code).toBe('ETICKETFORBIDDEN');
    expect(server.inspect('orders/1')?.token).toBe(held.token);

    expect((await billing.acquire('billing/1', { waitMs: 0 })).status).toBe('acquired');
    expect(closes).toEqual([]); // no connection of either client was closed
    expect((await orders.release('orders/1', held.token)).status).toBe('released');
  });
});

test('a hold() whose keep the rules now forbid ends with ForbiddenError at once', async () => {
  const { server, port } = await aclServer(rules(ORDERS));
  const orders = client(port, { secret: 'orders-secret' });
  const hold = await orders.hold('orders/1', { waitMs: 0, keepEveryMs: 50 });
  const moved = { ...ORDERS, allow: [{ prefix: 'orders2/', verbs: ['lock'] }] };
  expect(server.setAccess(rules(moved))).toBe(0); // the same identity, other rules
  await until(() => hold.signal.aborted, 'the hold to end', 2_000);
  expect(hold.signal.reason).toBeInstanceOf(ForbiddenError);
});

test('publish needs lock and observe needs observe: refused F <token> <key> and F <key> <key>; U is always answered', async () => {
  const { server, port } = await aclServer(rules(BILLING, ORDERS));
  const [billing, orders] = [await lines(port), await lines(port)];
  billing.write('H billing-secret\n');
  orders.write('H orders-secret\nA orders/1 o 0\n');
  const token = tokenOf(await orders.readLine());
  billing.write(`P orders/1 ${token} hijacked\nO orders/1\nO billing/1\nU orders/1\n`);
  expect(await billing.readLines(4)).toEqual([
    `F ${token} orders/1`,
    'F orders/1 orders/1',
    expect.stringMatching(/^V billing\/1 \d+ -$/),
    'U orders/1',
  ]);
  expect(server.inspect('orders/1')?.holders[0]?.value).toBeUndefined();
  // orders has lock on its keys but no observe.
  orders.write(`P orders/1 ${token} leader-1\nO orders/1\n`);
  expect(await orders.readLines(2)).toEqual([`P ${token} orders/1`, 'F orders/1 orders/1']);
});

test('TicketClient: a forbidden publish rejects, a forbidden observation ends, with ForbiddenError; the connection goes on', async () => {
  const { server, port } = await aclServer(rules(BILLING, ORDERS));
  const closes = clientCloses();
  const orders = client(port, { secret: 'orders-secret' });
  const held = await orders.acquire('orders/1', { waitMs: 0 });
  if (held.status !== 'acquired') throw new Error(held.status);
  const billing = client(port, { secret: 'billing-secret' });
  const publish = (await billing.publish('orders/1', held.token, 'x').catch((e: unknown) => e)) as ForbiddenError;
  expect(publish).toBeInstanceOf(ForbiddenError);
  expect(publish.code).toBe('ETICKETFORBIDDEN');
  const observation = orders.observe('orders/1'); // orders may lock its keys, not observe them
  const ended = (await observation.next().catch((e: unknown) => e)) as ForbiddenError;
  expect(ended).toBeInstanceOf(ForbiddenError);
  // billing observes its own keys on the same connection as its refused publish.
  const own = billing.observe('billing/1');
  expect((await own.next()).value).toMatchObject({ holders: 0 });
  await own.return();
  expect(server.inspect('orders/1')?.holders[0]?.value).toBeUndefined();
  expect(closes).toEqual([]);
});

test('a read-only identity may not lock (F), and reads every row of /v1/locks', async () => {
  const { server, port } = await aclServer(rules(ORDERS, OPS), true);
  const ops = await lines(port, opsCert);
  ops.write('A orders/1 o 0\n');
  expect(await ops.readLine()).toBe('F o orders/1');
  expect(server.inspect('orders/1')).toBeUndefined();
  expect(ops.closed).toBe(false);
});

describe('quotas, counted per identity across its connections', () => {
  test('maxHeld and maxWaiting: B over them, and grants count until released, after their connection closed', async () => {
    const limited = { ...ORDERS, maxHeld: 3, maxWaiting: 1 };
    const { server, port } = await aclServer(rules(limited, { ...BILLING, cn: undefined }));
    const [one, two, other] = [await lines(port), await lines(port), await lines(port)];
    one.write('H orders-secret\n');
    two.write('H orders-secret\n');
    other.write('H billing-secret\n');
    other.write('A billing/x x 0\n');
    expect(await other.readLine()).toMatch(/^A \d+ x billing\/x$/);

    one.write('A orders/1 a 0\n');
    const first = tokenOf(await one.readLine()); // held 1
    two.write('A orders/1 w 10000\n'); // queued: waiting 1
    await until(() => server.inspect('orders/1')?.waiters.length === 1, 'the queued request');
    one.write('A orders/2 q 10000\n'); // may wait, and one is waiting already
    expect(await one.readLine()).toBe('B q orders/2');
    one.write('A orders/2 b 0\n'); // may not wait: held 2 + waiting 1
    tokenOf(await one.readLine());
    two.write('A orders/3 c 0\n'); // at maxHeld, counting the queued one
    expect(await two.readLine()).toBe('B c orders/3');
    expect(server.inspect('orders/3')).toBeUndefined();

    // The queued request is granted (held 2, waiting 0), which leaves room for one more.
    one.write(`R orders/1 ${first}\n`);
    expect(await one.readLine()).toBe(`R ${first} orders/1`);
    const handedOff = tokenOf(await two.readLine());
    one.write('A orders/5 f 0\n');
    tokenOf(await one.readLine()); // held 3
    // A grant outlives its connection: closing `two` frees nothing.
    two.destroy();
    await until(() => server.stats().connections === 2, 'the close');
    one.write('A orders/4 d 0\n');
    expect(await one.readLine()).toBe('B d orders/4');
    // The other identity's quota is its own (none here).
    other.write('A billing/y y 0\n');
    expect(await other.readLine()).toMatch(/^A \d+ y billing\/y$/);
    // A release (on any connection of it) frees its place.
    one.write(`R orders/1 ${handedOff}\n`);
    expect(await one.readLine()).toBe(`R ${handedOff} orders/1`);
    one.write('A orders/4 e 0\n');
    expect(await one.readLine()).toMatch(/^A \d+ e orders\/4$/);
  });

  test('shared grants of one key count against each holder, and end one by one', async () => {
    const one = { ...ORDERS, allow: [{ prefix: '', verbs: ['lock'] }], maxHeld: 1 };
    const two = { ...BILLING, cn: undefined, allow: [{ prefix: '', verbs: ['lock'] }], maxHeld: 1 };
    const { port } = await aclServer(rules(one, two));
    const [a, b] = [await lines(port), await lines(port)];
    a.write('H orders-secret\nA shared/k a1 0 s\n');
    b.write('H billing-secret\nA shared/k b1 0 s\n');
    const [tokenA, tokenB] = [tokenOf(await a.readLine()), tokenOf(await b.readLine())];
    a.write('A other/k a2 0\n');
    b.write('A other/k b2 0\n');
    expect([await a.readLine(), await b.readLine()]).toEqual(['B a2 other/k', 'B b2 other/k']);
    b.write(`R shared/k ${tokenB}\nA other/k b3 0\n`);
    expect(await b.readLine()).toBe(`R ${tokenB} shared/k`);
    expect(await b.readLine()).toMatch(/^A \d+ b3 other\/k$/);
    a.write('A other/j a3 0\n'); // `a` still holds its shared grant
    expect(await a.readLine()).toBe('B a3 other/j');
    a.write(`R shared/k ${tokenA}\nA other/j a4 0\n`);
    expect(await a.readLines(2)).toEqual([`R ${tokenA} shared/k`, expect.stringMatching(/^A \d+ a4 other\/j$/)]);
  });
});

describe('credentials that name no identity are refused', () => {
  test('a wrong secret: E auth_failed', async () => {
    const { port } = await aclServer(rules(ORDERS));
    const conn = await lines(port);
    conn.write('H not-a-secret\nA orders/1 o 0\n');
    expect(await conn.readLine()).toBe('E auth_failed');
    await conn.waitClosed();
    const c = client(port, { secret: 'not-a-secret' });
    expect(await c.acquire('orders/1', { waitMs: 0 }).catch((e: unknown) => e)).toBeInstanceOf(AuthFailedError);
  });

  test('a certificate from the trusted CA whose CN names no identity: E auth_failed (without a good H)', async () => {
    const { server, port } = await aclServer(rules(BILLING, ORDERS), true);
    const stranger = await lines(port, strangerCert);
    stranger.write('W\n');
    expect(await stranger.readLine()).toBe('E auth_failed');
    await stranger.waitClosed();
    // A certificate that names an identity needs no H, and an H first line is accepted and ignored.
    const billing = await lines(port, billingCert);
    billing.write('H billing-secret\nA billing/1 b 0\n');
    expect(await billing.readLine()).toMatch(/^A \d+ b billing\/1$/);
    expect(server.inspect('billing/1')?.owner).toBe('b');
  });
});

test('replacing the rules: a removed identity is closed and refused, an added one admitted, others unchanged', async () => {
  const { server, port } = await aclServer(rules(BILLING, ORDERS));
  const [billing, orders] = [await lines(port), await lines(port)];
  billing.write('H billing-secret\nA billing/1 b 0\n');
  const token = tokenOf(await billing.readLine());
  orders.write('H orders-secret\n');
  const ops = { ...OPS, cn: undefined, secretSha256: sha256('ops-secret') };

  expect(server.setAccess(rules({ ...ORDERS, maxHeld: 1 }, ops))).toBe(1);
  expect(await billing.readLine()).toBe('E auth_failed the access rules no longer admit this identity');
  await billing.waitClosed();
  const again = await lines(port);
  again.write('H billing-secret\nW\n');
  expect(await again.readLine()).toBe('E auth_failed');
  // Its grant is a lease like any other: it stays until released or expired.
  expect(server.inspect('billing/1')?.token).toBe(token);
  orders.write('A orders/1 o 0\n');
  expect(await orders.readLine()).toMatch(/^A \d+ o orders\/1$/);
  // The same rules again: the quota's count goes on (one held, maxHeld 1).
  server.setAccess(rules({ ...ORDERS, maxHeld: 1 }, ops));
  orders.write('A orders/2 o 0\n');
  expect(await orders.readLine()).toBe('B o orders/2');
  const added = await lines(port);
  added.write('H ops-secret\nW\n');
  expect(await added.readLine()).toBe('W');
});

describe('/v1/locks lists only what the identity may read', () => {
  test('by bearer secret and by client certificate; none without read; 401 for no identity', async () => {
    const opsBySecret = { ...OPS, secretSha256: sha256('ops-secret') };
    const { server, port } = await aclServer(rules(BILLING, ORDERS, opsBySecret), true);
    const material = TlsMaterial.load({ cert: serverCert.certFile, key: serverCert.keyFile, ca: ca.certFile });
    const metrics = new TicketMetrics({ server });
    const endpoint = new HttpEndpoint({
      server,
      metrics,
      tls: material.secureContextOptions,
      clientCertificates: true,
    });
    const { port: httpPort } = await endpoint.listen();
    cleanups.push(
      () => endpoint.close(),
      () => metrics.close(),
    );
    const billing = client(port, { cert: billingCert });
    const orders = client(port, { secret: 'orders-secret', cert: strangerCert });
    expect((await billing.acquire('billing/1', { waitMs: 0 })).status).toBe('acquired');
    expect((await orders.acquire('orders/1', { waitMs: 0 })).status).toBe('acquired');

    const list = async (
      secret?: string,
      cert?: CertFiles,
      path = '/v1/locks',
    ): Promise<{ status: number; keys: string[] }> => {
      const response = await new Promise<import('node:http').IncomingMessage>((resolve, reject) =>
        https
          .get(
            {
              host: '127.0.0.1',
              port: httpPort,
              path,
              ...tlsTo(cert),
              headers: secret === undefined ? {} : { authorization: `Bearer ${secret}` },
            },
            resolve,
          )
          .on('error', reject),
      );
      let body = '';
      for await (const chunk of response) body += String(chunk);
      const parsed = JSON.parse(body) as Array<{ key: string }> | { error: string };
      return { status: response.statusCode!, keys: Array.isArray(parsed) ? parsed.map((row) => row.key) : [] };
    };
    expect(await list('ops-secret')).toEqual({ status: 200, keys: ['billing/1', 'orders/1'] });
    expect(await list(undefined, opsCert)).toEqual({ status: 200, keys: ['billing/1', 'orders/1'] });
    expect(await list('orders-secret')).toEqual({ status: 200, keys: ['orders/1'] });
    expect(await list(undefined, billingCert)).toEqual({ status: 200, keys: [] });
    expect(await list('wrong')).toEqual({ status: 401, keys: [] });
    expect(await list(undefined, strangerCert)).toEqual({ status: 401, keys: [] });
    // The console's data needs read on every key.
    expect(await list('ops-secret', undefined, '/v1/node')).toMatchObject({ status: 200 });
    expect(await list('orders-secret', undefined, '/v1/node')).toMatchObject({ status: 401 });

    // The refusal metric, by identity and verb.
    await billing.acquire('orders/1', { waitMs: 0 }).catch(() => {});
    expect(await metrics.metrics()).toContain('ticketing_access_refusals_total{identity="billing",verb="lock"} 1');
  });
});

describe('ticketing serve --acl-file', () => {
  const aclFile = join(pki.dir, 'acl.json');
  const write = (...identities: IdentityFile[]): void => writeFileSync(aclFile, JSON.stringify({ identities }));

  test('a malformed file, or --secret-file beside it: exit 64, saying why', async () => {
    writeFileSync(aclFile, JSON.stringify({ identities: [{ name: 'x', allow: [] }] }));
    const malformed = await runCli(['serve', '--port', '0', '--acl-file', aclFile]);
    expect(malformed.code).toBe(64);
    expect(malformed.stderr).toContain(`ACL file ${aclFile}: identities[0]: "x" needs secretSha256 or cn`);
    write(ORDERS);
    const both = await runCli(['serve', '--port', '0', '--acl-file', aclFile, '--secret-file', aclFile]);
    expect(both.code).toBe(64);
    expect(both.stderr).toContain('--acl-file and --secret-file exclude each other');
    expect((await runCli(['serve', '--port', '0', '--acl-file', join(pki.dir, 'missing.json')])).code).toBe(1);
    // Its secrets would cross the network in clear text.
    const exposed = await runCli(['serve', '--port', '0', '--host', '0.0.0.0', '--acl-file', aclFile]);
    expect(exposed.code).toBe(64);
    expect(exposed.stderr).toContain('--acl-file on --host 0.0.0.0 without --tls-cert');
  });

  test('SIGHUP: removes and adds identities (open connections of a removed one closed); a broken file keeps the old rules', async () => {
    write(ORDERS, { ...BILLING, cn: undefined });
    const served = await spawnServer(['--acl-file', aclFile]);
    cleanups.push(() => void served.child.kill('SIGKILL'));
    const [orders, billing] = [await lines(served.port), await lines(served.port)];
    orders.write('H orders-secret\nA billing/1 o 0\n');
    expect(await orders.readLine()).toBe('F o billing/1');
    await until(() => served.stderr().includes('"msg":"refused by access control"'), 'the audit line');
    expect(served.stderr()).toMatch(/"identity":"orders","verb":"lock","key":"billing\/1"/);
    billing.write('H billing-secret\nA billing/1 b 0\n');
    expect(await billing.readLine()).toMatch(/^A \d+ b billing\/1$/);

    // A broken file: logged, and the rules in force stay.
    writeFileSync(aclFile, '{"identities": [');
    served.child.kill('SIGHUP');
    await until(() => served.stderr().includes('access rules reload failed: keeping the previous rules'), 'the error');
    billing.write('A billing/2 b 0\n');
    expect(await billing.readLine()).toMatch(/^A \d+ b billing\/2$/);

    const ops = { ...OPS, cn: undefined, secretSha256: sha256('ops-secret') };
    write(ORDERS, ops);
    served.child.kill('SIGHUP');
    expect(await billing.readLine()).toBe('E auth_failed the access rules no longer admit this identity');
    await billing.waitClosed();
    expect(served.stderr()).toMatch(/"identities":2,"closed":1,"msg":"access rules reloaded"/);
    const refused = await lines(served.port);
    refused.write('H billing-secret\nW\n');
    expect(await refused.readLine()).toBe('E auth_failed');
    const added = await lines(served.port);
    added.write('H ops-secret\nW\n');
    expect(await added.readLine()).toBe('W');
    orders.write('A orders/1 o 0\n');
    expect(await orders.readLine()).toMatch(/^A \d+ o orders\/1$/);
  });
});

test('refusals are logged with identity, verb and key, at most `burst` per window, then one line says how many were not', async () => {
  const { server, port } = await aclServer(rules(ORDERS));
  const logged: Array<Record<string, unknown>> = [];
  const logger = createLogger('info', {
    write: (line: string) => void logged.push(JSON.parse(line) as Record<string, unknown>),
  });
  const log = new ServerLog({ logger, server, burst: 3, windowMs: 200 });
  cleanups.push(() => log.close());
  const conn = await lines(port);
  conn.write('H orders-secret\n');
  for (let i = 0; i < 5; i++) conn.write(`A billing/${i} o${i} 0\n`);
  expect(await conn.readLines(5)).toHaveLength(5);
  const refused = () => logged.filter((l) => l.msg === 'refused by access control');
  expect(refused().map(({ identity, verb, key }) => ({ identity, verb, key }))).toEqual(
    [0, 1, 2].map((i) => ({ identity: 'orders', verb: 'lock', key: `billing/${i}` })),
  );
  await until(() => logged.some((l) => l.msg === 'access refusals not logged (rate limit)'), 'the summary');
  expect(logged.find((l) => l.msg === 'access refusals not logged (rate limit)')).toMatchObject({ suppressed: 2 });
});

describe('the rules', () => {
  test('a key matches a rule by prefix, whatever the order and overlap of the rules', () => {
    const identity = rules({
      name: 'x',
      cn: 'x',
      allow: [
        { prefix: 'a/b/', verbs: ['lock'] },
        { prefix: 'a/', verbs: ['lock'] },
        { prefix: 'a/c', verbs: ['lock'] },
        { prefix: 'b', verbs: ['read'] },
        { prefix: 'm/', verbs: ['lock', 'observe'] },
      ],
    }).byName('x')!;
    expect(identity.prefixes('lock')).toEqual(['a/', 'm/']);
    for (const key of ['a/', 'a/x', 'a/b/c', 'a/cz', 'm/1']) expect(identity.may('lock', key)).toBe(true);
    for (const key of ['a', 'b', 'b/1', 'l/', 'm', 'z', '/a/']) expect(identity.may('lock', key)).toBe(false);
    expect(identity.may('read', 'bee')).toBe(true);
    expect(identity.may('observe', 'a/1')).toBe(false);
    const everything = rules({ name: 'y', cn: 'y', allow: [{ prefix: '', verbs: ['read'] }] }).byName('y')!;
    expect(everything.may('read', 'anything')).toBe(true);
    expect(everything.may('lock', 'anything')).toBe(false);
  });

  test('a secret names its identity (SHA-256, constant-time compare); a certificate by its CN', () => {
    const acl = rules(BILLING, ORDERS);
    expect(acl.bySecret('orders-secret')?.name).toBe('orders');
    expect(acl.bySecret('orders-secret ')).toBeUndefined();
    expect(acl.byCertificate('billing-worker')?.name).toBe('billing');
    expect(acl.byCertificate('orders')).toBeUndefined();
  });

  test.each([
    ['not json', '{', /^not JSON: /],
    ['no identities array', '{"identities":{}}', /^identities: must be an array$/],
    ['an unknown top-level field', '{"identities":[],"users":[]}', /^unknown field "users"$/],
    [
      'a typo in a field',
      JSON.stringify({ identities: [{ ...ORDERS, maxheld: 1 }] }),
      /identities\[0\]: unknown field "maxheld"/,
    ],
    ['no credential', JSON.stringify({ identities: [{ name: 'n', allow: [] }] }), /needs secretSha256 or cn/],
    [
      'a bad hash',
      JSON.stringify({ identities: [{ ...ORDERS, secretSha256: 'abc' }] }),
      /secretSha256: must be 64 hex/,
    ],
    [
      'a duplicate name',
      JSON.stringify({ identities: [ORDERS, { ...BILLING, name: 'orders' }] }),
      /identities\[1\]\.name: "orders" is already/,
    ],
    [
      'a shared secret',
      JSON.stringify({ identities: [ORDERS, { ...BILLING, secretSha256: ORDERS.secretSha256 }] }),
      /another identity/,
    ],
    [
      'an unknown verb',
      JSON.stringify({ identities: [{ ...ORDERS, allow: [{ prefix: 'o/', verbs: ['write'] }] }] }),
      /allow\[0\]\.verbs\[0\]: unknown verb "write"/,
    ],
    [
      'a prefix with a space',
      JSON.stringify({ identities: [{ ...ORDERS, allow: [{ prefix: 'o /', verbs: ['lock'] }] }] }),
      /allow\[0\]\.prefix: must be/,
    ],
    [
      'a negative quota',
      JSON.stringify({ identities: [{ ...ORDERS, maxWaiting: -1 }] }),
      /maxWaiting: must be an integer/,
    ],
  ])('a malformed file is refused, saying where and why: %s', (_what, text, message) => {
    const error = (() => {
      try {
        AccessRules.parse(text);
      } catch (e) {
        return e;
      }
      return undefined;
    })() as AccessFileError;
    expect(error).toBeInstanceOf(AccessFileError);
    expect(error.message).toMatch(message);
  });

  test('F parses as a reply naming the refused request (owner, token or key) and its key', () => {
    expect(parseReply('F owner-1 orders/1')).toEqual({ op: 'F', id: 'owner-1', key: 'orders/1' });
    expect(parseReply('F 1796000000000001 orders/1')).toEqual({ op: 'F', id: '1796000000000001', key: 'orders/1' });
    for (const bad of ['F', 'F orders/1', 'F a b c', 'F  k', 'F a\tb k']) expect(parseReply(bad), bad).toBeUndefined();
  });

  test('the server takes access rules or a secret, not both', () => {
    expect(() => new TicketServer({ access: rules(ORDERS), secret: 's' })).toThrow(/exclude each other/);
  });
});
