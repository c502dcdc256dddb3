/**
 * Real certificates for tests, made with `openssl` in a temporary directory: a CA, server
 * certificates for 127.0.0.1/localhost, and client certificates (a good one, an expired one, one
 * from another CA). EC P-256 keys, so that making them takes milliseconds.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ConnectionOptions } from 'node:tls';

/** A certificate and its key, as file paths. */
export interface CertFiles {
  readonly cert: string;
  readonly key: string;
}

export interface TestPki {
  readonly dir: string;
  /** The CA that signed everything below except `foreignClient`. */
  readonly ca: string;
  /** Another CA, which signed `foreignClient`. */
  readonly otherCa: string;
  /** Server certificates for 127.0.0.1 and localhost (two, to see a reload switch between them). */
  readonly server: CertFiles;
  readonly server2: CertFiles;
  readonly client: CertFiles;
  /** Signed by `ca`, but its validity ended before it began (expired). */
  readonly expiredClient: CertFiles;
  /** Valid, but signed by `otherCa`. */
  readonly foreignClient: CertFiles;
  /** Removes the directory. */
  remove(): void;
}

function openssl(dir: string, args: string[]): void {
  execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
}

const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];

function makeCa(dir: string, name: string): string {
  openssl(dir, [
    'req',
    '-x509',
    ...EC,
    '-keyout',
    `${name}.key`,
    '-out',
    `${name}.pem`,
    '-subj',
    `/CN=${name}`,
    '-days',
    '30',
  ]);
  return join(dir, `${name}.pem`);
}

/** A certificate signed by CA `ca` (its basename), valid for `days` (negative: expired). */
function makeCert(dir: string, ca: string, name: string, days: number, serverNames: boolean): CertFiles {
  openssl(dir, ['req', ...EC, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`]);
  const ext = serverNames ? 'subjectAltName=IP:127.0.0.1,DNS:localhost' : 'extendedKeyUsage=clientAuth';
  const extFile = join(dir, `${name}.ext`);
  execFileSync('sh', ['-c', `printf '%s\\n' "$1" > "$2"`, 'sh', ext, extFile]);
  openssl(dir, [
    'x509',
    '-req',
    '-in',
    `${name}.csr`,
    '-CA',
    `${ca}.pem`,
    '-CAkey',
    `${ca}.key`,
    '-CAcreateserial',
    '-out',
    `${name}.pem`,
    '-days',
    String(days),
    '-extfile',
    extFile,
  ]);
  return { cert: join(dir, `${name}.pem`), key: join(dir, `${name}.key`) };
}

/** Makes a fresh set of certificates in a new temporary directory. */
export function makePki(): TestPki {
  const dir = mkdtempSync(join(tmpdir(), 'ticketing-pki-'));
  const ca = makeCa(dir, 'ca');
  const otherCa = makeCa(dir, 'other-ca');
  return {
    dir,
    ca,
    otherCa,
    server: makeCert(dir, 'ca', 'server', 30, true),
    server2: makeCert(dir, 'ca', 'server2', 30, true),
    client: makeCert(dir, 'ca', 'client', 30, false),
    expiredClient: makeCert(dir, 'ca', 'expired-client', -1, false),
    foreignClient: makeCert(dir, 'other-ca', 'foreign-client', 30, false),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** `tls.connect` options that trust `pki.ca` and, given one, present a client certificate. */
export function clientTls(pki: TestPki, client?: CertFiles): ConnectionOptions {
  return {
    ca: readFileSync(pki.ca),
    ...(client === undefined ? {} : { cert: readFileSync(client.cert), key: readFileSync(client.key) }),
  };
}

/** The serial number of the certificate a TLS peer presented, as `openssl x509 -serial` prints it. */
export function serialOf(certFile: string): string {
  return execFileSync('openssl', ['x509', '-in', certFile, '-noout', '-serial'], { encoding: 'utf8' })
    .trim()
    .replace(/^serial=/, '');
}
