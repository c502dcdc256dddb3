/**
 * The certificates the TLS tests use, issued by certs.mjs in a temporary directory: a CA, server
 * certificates for 127.0.0.1/localhost, and client certificates (a good one, an expired one, one
 * from another CA).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import type { ConnectionOptions } from 'node:tls';
import { createCa, type IssuedCertificate, type IssueOptions } from './certs.mjs';

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

const files = (issued: IssuedCertificate): CertFiles => ({ cert: issued.certFile, key: issued.keyFile });

/** Makes a fresh set of certificates in a new temporary directory (certs.mjs issues them). */
export async function makePki(): Promise<TestPki> {
  const ca = await createCa({ days: 30 });
  const other = await createCa({ dir: ca.dir, name: 'other-ca', commonName: 'flocklease other test CA', days: 30 });
  const server: Omit<IssueOptions, 'name'> = { hosts: ['127.0.0.1', 'localhost'], usage: ['serverAuth'], days: 30 };
  const client: Omit<IssueOptions, 'name'> = { usage: ['clientAuth'], days: 30 };
  return {
    dir: ca.dir,
    ca: ca.certFile,
    otherCa: other.certFile,
    server: files(await ca.issue({ name: 'server', ...server })),
    server2: files(await ca.issue({ name: 'server2', ...server })),
    client: files(await ca.issue({ name: 'client', ...client })),
    expiredClient: files(await ca.issue({ name: 'expired-client', usage: ['clientAuth'], days: -1 })),
    foreignClient: files(await other.issue({ name: 'foreign-client', ...client })),
    remove: () => ca.remove(),
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
