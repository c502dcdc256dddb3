/**
 * TLS for clients (issue 45 §1), with real certificates made by openssl (tls-helpers.ts): the
 * round trip through TicketClient, mutual TLS, refused certificates on both sides, a plain-TCP
 * client on a TLS port, the CLI's rules and exit codes, and a SIGHUP reload of a running
 * `ticketing serve`.
 */
import { copyFileSync, writeFileSync } from 'node:fs';
import { once } from 'node:events';
import net from 'node:net';
import { join } from 'node:path';
import tls from 'node:tls';
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import { TicketClient } from '../src/client.js';
import { CertificateError, TlsMismatchError } from '../src/errors.js';
import { parseReply } from '../src/protocol.js';
import { TicketServer } from '../src/server/server.js';
import { TlsMaterial, TlsMaterialError } from '../src/server/tls-material.js';
import { runCli, spawnServer, until } from './helpers.js';
import { clientTls, makePki, serialOf, type TestPki } from './tls-helpers.js';

const pki: TestPki = await makePki();
afterAll(() => pki.remove());
const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

async function tlsServer(mutual: boolean): Promise<{ server: TicketServer; port: number }> {
  const material = TlsMaterial.load({ ...pki.server, ca: mutual ? pki.ca : undefined });
  const server = new TicketServer({ port: 0, tls: material });
  const { port } = await server.listen();
  cleanups.push(() => server.close());
  return { server, port };
}

function client(port: number, options: tls.ConnectionOptions, secret?: string): TicketClient {
  const c = new TicketClient({ port, tls: options, secret, connectTimeoutMs: 2_000 });
  cleanups.push(() => c.destroy());
  return c;
}

describe('TLS between TicketClient and TicketServer', () => {
  test('acquire and release round trip over TLS 1.2+', async () => {
    const { server, port } = await tlsServer(false);
    const c = client(port, clientTls(pki));
    const got = await c.acquire('orders', { waitMs: 0 });
    expect(got.status).toBe('acquired');
    if (got.status !== 'acquired') return;
    expect(server.inspect('orders')?.token).toBe(got.token);
    expect((await c.release('orders', got.token)).status).toBe('released');
    expect(server.inspect('orders')).toBeUndefined();
  });

  test('TLS 1.1 is not served', async () => {
    const { port } = await tlsServer(false);
    const socket = tls.connect({
      port,
      host: '127.0.0.1',
      ...clientTls(pki),
      minVersion: 'TLSv1',
      maxVersion: 'TLSv1.1',
    });
    const [error] = (await once(socket, 'error')) as [NodeJS.ErrnoException];
    expect(error.code).toMatch(/^ERR_SSL_/);
  });

  test('a server certificate the client does not trust: CertificateError (ETICKETCERT), not Indeterminate', async () => {
    const { server, port } = await tlsServer(false);
    const c = client(port, { ca: clientTls(pki).ca, servername: 'not-the-name.example' });
    const error = (await c.acquire('k', { waitMs: 0 }).catch((e: unknown) => e)) as CertificateError;
    expect(error).toBeInstanceOf(CertificateError);
    expect(error.code).toBe('ETICKETCERT');
    expect((error.cause as NodeJS.ErrnoException).code).toBe('ERR_TLS_CERT_ALTNAME_INVALID');
    const untrusted = client(port, {});
    const second = (await untrusted.acquire('k', { waitMs: 0 }).catch((e: unknown) => e)) as CertificateError;
    expect(second.code).toBe('ETICKETCERT');
    expect(server.inspect('k')).toBeUndefined();
  });

  describe('mutual TLS (a CA given): client certificates required and verified', () => {
    test('a certificate from the CA is served', async () => {
      const { port } = await tlsServer(true);
      const got = await client(port, clientTls(pki, pki.client)).acquire('k', { waitMs: 0 });
      expect(got.status).toBe('acquired');
    });

    for (const [what, cert] of [
      ['no certificate', undefined],
      ['an expired certificate', 'expiredClient'],
      ['a certificate from another CA', 'foreignClient'],
    ] as const) {
      test(`${what}: refused with ETICKETCERT, and nothing is held`, async () => {
        const { server, port } = await tlsServer(true);
        const c = client(port, clientTls(pki, cert === undefined ? undefined : pki[cert]));
        const error = (await c.acquire('k', { waitMs: 0 }).catch((e: unknown) => e)) as CertificateError;
        expect(error).toBeInstanceOf(CertificateError);
        expect(error.code).toBe('ETICKETCERT');
        if (cert === undefined) expect(error.message).toContain('no client certificate');
        else expect(error.message).not.toContain('no client certificate');
        expect(server.inspect('k')).toBeUndefined();
      });
    }
  });

  test('TicketClient without tls on a TLS port: TlsMismatchError saying to pass tls, not "no definitive reply"', async () => {
    const { server, port } = await tlsServer(false);
    const plain = new TicketClient({ port, connectTimeoutMs: 10_000 });
    cleanups.push(() => plain.destroy());
    const error = (await plain.acquire('k', { waitMs: 0 }).catch((e: unknown) => e)) as TlsMismatchError;
    expect(error).toBeInstanceOf(TlsMismatchError);
    expect(error).toMatchObject({ code: 'ETICKETTLSMISMATCH', op: 'acquire', key: 'k' });
    expect(error.message).toMatch(/speaks TLS and this client has no tls option: pass tls/);
    expect(server.inspect('k')).toBeUndefined();
  });

  test('TicketClient with tls on a plain port: TlsMismatchError saying the server does not speak TLS', async () => {
    const server = new TicketServer({ port: 0 });
    const { port } = await server.listen();
    cleanups.push(() => server.close());
    const c = client(port, clientTls(pki));
    const error = (await c.acquire('k', { waitMs: 0 }).catch((e: unknown) => e)) as TlsMismatchError;
    expect(error).toMatchObject({ code: 'ETICKETTLSMISMATCH' });
    expect(error.message).toMatch(/does not speak TLS \(it answered in plain text\): drop the tls option/);
    expect(server.inspect('k')).toBeUndefined();
  });

  test('a plain-TCP client on a TLS port gets nothing that parses as the protocol, and no lock', async () => {
    const { server, port } = await tlsServer(false);
    const socket = net.connect(port, '127.0.0.1');
    socket.on('error', () => {});
    const received: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => received.push(chunk));
    await once(socket, 'connect');
    socket.write('A k owner 0\n');
    await once(socket, 'close');
    const lines = Buffer.concat(received).toString('latin1').split('\n');
    for (const line of lines) expect(parseReply(line)).toBeUndefined();
    expect(server.inspect('k')).toBeUndefined();
  });
});

describe('TlsMaterial: bad files are refused with a clear error', () => {
  test('missing file, not PEM, key of another certificate', () => {
    expect(() => TlsMaterial.load({ cert: join(pki.dir, 'nope.pem'), key: pki.server.key })).toThrow(
      /TLS certificate .*nope\.pem: cannot be read \(ENOENT\)/,
    );
    expect(() => TlsMaterial.load({ cert: pki.server.key, key: pki.server.key })).toThrow(TlsMaterialError);
    expect(() => TlsMaterial.load({ cert: pki.server.cert, key: pki.client.key })).toThrow(
      /TLS key .*client\.key does not match certificate .*server\.crt/,
    );
  });
});

describe('ticketing serve with TLS', () => {
  test('--secret-file on a non-loopback host without TLS is a usage error (64); the opt-out works', async () => {
    const secret = join(pki.dir, 'secret');
    writeFileSync(secret, 's3cret\n');
    const refused = await runCli(['serve', '--host', '0.0.0.0', '--port', '0', '--secret-file', secret]);
    expect(refused.code).toBe(64);
    expect(refused.stderr).toMatch(/clear text.*--tls-cert.*--allow-plaintext-secret/);
    const allowed = await spawnServer(['--host', '0.0.0.0', '--secret-file', secret, '--allow-plaintext-secret']);
    cleanups.push(() => void allowed.child.kill('SIGKILL'));
    const withTls = await spawnServer([
      '--host',
      '0.0.0.0',
      '--secret-file',
      secret,
      '--tls-cert',
      pki.server.cert,
      '--tls-key',
      pki.server.key,
    ]);
    cleanups.push(() => void withTls.child.kill('SIGKILL'));
    expect(allowed.port).toBeGreaterThan(0);
    expect(withTls.port).toBeGreaterThan(0);
  });

  test('bad TLS files: exit 1 before listening, with a clear message', async () => {
    const missing = await runCli(['serve', '--tls-cert', join(pki.dir, 'nope.pem'), '--tls-key', pki.server.key]);
    expect(missing).toMatchObject({ code: 1, stdout: '' });
    expect(missing.stderr).toMatch(/TLS certificate .*nope\.pem: cannot be read \(ENOENT\)/);
    const mismatch = await runCli(['serve', '--tls-cert', pki.server.cert, '--tls-key', pki.client.key]);
    expect(mismatch).toMatchObject({ code: 1, stdout: '' });
    expect(mismatch.stderr).toMatch(/does not match certificate/);
    const alone = await runCli(['serve', '--tls-cert', pki.server.cert]);
    expect(alone.code).toBe(64);
  });

  test('SIGHUP reloads: new connections get the new certificate, open ones keep working, a broken file keeps the old', async () => {
    const cert = join(pki.dir, 'live.pem');
    const key = join(pki.dir, 'live.key');
    copyFileSync(pki.server.cert, cert);
    copyFileSync(pki.server.key, key);
    const secretFile = join(pki.dir, 'live.secret');
    writeFileSync(secretFile, 'first-secret\n');
    const served = await spawnServer(['--tls-cert', cert, '--tls-key', key, '--secret-file', secretFile]);
    cleanups.push(() => void served.child.kill('SIGKILL'));
    const peerSerial = async (): Promise<string> => {
      const socket = tls.connect({ port: served.port, host: '127.0.0.1', ...clientTls(pki) });
      await once(socket, 'secureConnect');
      const serial = socket.getPeerCertificate().serialNumber;
      socket.destroy();
      return serial.toUpperCase();
    };
    expect(await peerSerial()).toBe(serialOf(pki.server.cert));
    const open = client(served.port, clientTls(pki), 'first-secret');
    expect((await open.acquire('a', { waitMs: 0 })).status).toBe('acquired');

    copyFileSync(pki.server2.cert, cert);
    copyFileSync(pki.server2.key, key);
    writeFileSync(secretFile, 'second-secret\n');
    served.child.kill('SIGHUP');
    await until(() => served.stderr().includes('"msg":"TLS reloaded"'), 'the reload', 5_000);
    await until(() => served.stderr().includes('"msg":"secret reloaded"'), 'the secret reload', 5_000);
    expect(await peerSerial()).toBe(serialOf(pki.server2.cert));
    expect((await open.acquire('b', { waitMs: 0 })).status).toBe('acquired');
    // New connections need the new secret; the old one is refused.
    expect((await client(served.port, clientTls(pki), 'second-secret').acquire('s', { waitMs: 0 })).status).toBe(
      'acquired',
    );
    await expect(client(served.port, clientTls(pki), 'first-secret').acquire('t', { waitMs: 0 })).rejects.toThrow();

    writeFileSync(key, 'not a key\n');
    served.child.kill('SIGHUP');
    await until(
      () => served.stderr().includes('TLS reload failed: keeping the previous material'),
      'the failed reload',
      5_000,
    );
    expect(served.stderr()).toMatch(/TLS key .*live\.key/);
    expect(await peerSerial()).toBe(serialOf(pki.server2.cert));
    expect((await open.acquire('c', { waitMs: 0 })).status).toBe('acquired');
    // A secret file that fails to load keeps the previous secret.
    writeFileSync(secretFile, 'two words\n');
    served.child.kill('SIGHUP');
    await until(
      () => served.stderr().includes('secret reload failed: keeping the previous secret'),
      'the failed secret reload',
      5_000,
    );
    expect((await client(served.port, clientTls(pki), 'second-secret').acquire('u', { waitMs: 0 })).status).toBe(
      'acquired',
    );
    expect(served.child.exitCode).toBeNull();
    expect(served.stderr()).not.toMatch(/first-secret|second-secret/);
  });
});
