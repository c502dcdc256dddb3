/**
 * Test certificates, generated with openssl: a CA and certificates it issues (EC P-256, PEM files).
 * Plain ESM (typed by certs.d.mts) so that the .mjs harness and TypeScript tests share one copy.
 * Each openssl run takes its settings from a config file written here, never from the host's
 * openssl.cnf, and is bounded in time.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const OPENSSL_TIMEOUT_MS = 20_000;
let serial = 0;

function openssl(args) {
  return new Promise((resolve, reject) => {
    execFile('openssl', args, { timeout: OPENSSL_TIMEOUT_MS }, (error, _stdout, stderr) => {
      if (error) reject(new Error(`openssl ${args[0]} failed: ${String(stderr).trim() || error.message}`));
      else resolve();
    });
  });
}

/** A config file with the subject and the extensions (one `key = value` per line). */
function writeConfig(file, commonName, extensions) {
  const lines = [
    '[req]',
    'distinguished_name = dn',
    'prompt = no',
    'x509_extensions = ext',
    '[dn]',
    // A subject without a CN (etcd refuses a CN on its HTTP gateway once auth is on).
    commonName === '' ? 'O = flocklease tests' : `CN = ${commonName}`,
    '[ext]',
    ...extensions,
  ];
  writeFileSync(file, `${lines.join('\n')}\n`);
}

const NEW_KEY = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-noenc'];

function sanOf(hosts) {
  return hosts.map((host) => (/^[\d.]+$/.test(host) || host.includes(':') ? `IP:${host}` : `DNS:${host}`)).join(',');
}

/**
 * Creates a CA in `dir` (a new temp dir when absent): `<name>.crt` and `<name>.key`, valid for
 * `days`. See certs.d.mts.
 */
export async function createCa({ dir, name = 'ca', commonName = 'flocklease test CA', days = 2 } = {}) {
  const ownDir = dir === undefined;
  const home = dir ?? mkdtempSync(join(tmpdir(), 'ticketing-certs-'));
  const certFile = join(home, `${name}.crt`);
  const keyFile = join(home, `${name}.key`);
  const config = join(home, `${name}.cnf`);
  writeConfig(config, commonName, [
    'basicConstraints = critical, CA:TRUE',
    'keyUsage = critical, keyCertSign, cRLSign',
    'subjectKeyIdentifier = hash',
  ]);
  await openssl([
    'req',
    '-x509',
    '-config',
    config,
    ...NEW_KEY,
    '-keyout',
    keyFile,
    '-out',
    certFile,
    '-days',
    String(days),
  ]);

  const ca = {
    dir: home,
    certFile,
    keyFile,
    cert: readFileSync(certFile, 'utf8'),
    async issue({
      name: certName,
      commonName: cn = certName,
      hosts = [],
      usage = ['serverAuth', 'clientAuth'],
      days: certDays = 2,
    }) {
      if (!/^[\w.-]+$/.test(certName)) throw new TypeError(`certificate name: letters, digits, . _ -, not ${certName}`);
      const certPath = join(home, `${certName}.crt`);
      const keyPath = join(home, `${certName}.key`);
      const csr = join(home, `${certName}.csr`);
      const certConfig = join(home, `${certName}.cnf`);
      writeConfig(certConfig, cn, [
        'basicConstraints = critical, CA:FALSE',
        'keyUsage = critical, digitalSignature, keyEncipherment',
        `extendedKeyUsage = ${usage.join(', ')}`,
        'authorityKeyIdentifier = keyid',
        ...(hosts.length > 0 ? [`subjectAltName = ${sanOf(hosts)}`] : []),
      ]);
      await openssl(['req', '-new', '-config', certConfig, ...NEW_KEY, '-keyout', keyPath, '-out', csr]);
      // `x509 -req` (unlike `req -x509`) takes a negative -days: an already expired certificate.
      await openssl([
        'x509',
        '-req',
        '-in',
        csr,
        '-CA',
        certFile,
        '-CAkey',
        keyFile,
        '-set_serial',
        String(process.pid * 1000 + ++serial),
        '-days',
        String(certDays),
        '-extfile',
        certConfig,
        '-extensions',
        'ext',
        '-out',
        certPath,
      ]);
      rmSync(csr, { force: true });
      return {
        name: certName,
        certFile: certPath,
        keyFile: keyPath,
        cert: readFileSync(certPath, 'utf8'),
        key: readFileSync(keyPath, 'utf8'),
      };
    },
    remove() {
      if (ownDir) rmSync(home, { recursive: true, force: true });
    },
  };
  return ca;
}
