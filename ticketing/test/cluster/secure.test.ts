/**
 * Cluster mode against a secure etcd: 3 members on loopback with TLS for clients and peers,
 * client certificates required (`--client-cert-auth`), and auth on, with a user whose role may
 * read and write the Ticketing prefix only (made with etcdctl by the harness). A node that etcd
 * refuses (permission, password, certificate) must exit with the reason, never hang.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CertificateAuthority } from '../certs.mjs';
import { createCa } from '../certs.mjs';
import { TicketClient } from '../../src/client.js';
import {
  findEtcd,
  startEtcdCluster,
  startTicketingNodes,
  waitForLeader,
  TICKETING_CLI,
  type EtcdCluster,
} from './harness.mjs';
import { ask, checkHistory, lostGrants, sleep, startLoad } from './support.js';

const etcd = await findEtcd();
if (etcd.reason !== undefined) console.warn(`secure cluster tests skipped: ${etcd.reason}`);

/** How long a refused node may take to exit: one access check, bounded by the call deadline. */
const REFUSED_EXIT_MS = 10_000;

/** The message of the log's `fatal` line (the refusal that ended the node), from its JSON stderr. */
function fatal(stderr: string): string {
  for (const line of stderr.split('\n')) {
    if (!line.startsWith('{')) continue;
    const entry = JSON.parse(line) as { level?: string; err?: { message?: string } };
    if (entry.level === 'fatal') return entry.err?.message ?? '';
  }
  return `(no fatal log line in: ${stderr})`;
}

describe.skipIf(etcd.reason !== undefined)('cluster mode on a secure etcd (TLS, client certificates, auth)', () => {
  let cluster: EtcdCluster;
  let foreignCa: CertificateAuthority;

  beforeAll(async () => {
    cluster = await startEtcdCluster({ members: 3, secure: true });
    foreignCa = await createCa({ commonName: 'a CA etcd does not trust' });
  }, 60_000);

  afterAll(async () => {
    await cluster?.stop();
    foreignCa?.remove();
  }, 60_000);

  /** `ticketing serve --cluster` on the secure etcd with `args` swapped into its access flags:
   * resolves its exit code, output and how long it ran. */
  async function serveRefused(replace: Record<string, string | null>, { tty = false } = {}) {
    const args = [...cluster.ticketingArgs];
    for (const [flag, value] of Object.entries(replace)) {
      const at = args.indexOf(flag);
      if (value === null) args.splice(at, 2);
      else args[at + 1] = value;
    }
    const started = performance.now();
    const argv = [
      process.execPath,
      TICKETING_CLI,
      'serve',
      '--cluster',
      '--etcd',
      cluster.endpoints.join(','),
      '--advertise',
      '127.0.0.1:1',
      '--prefix',
      '/ticketing-refused/',
      ...args,
    ];
    // With `tty`, under script(1): stderr is a terminal, and all of it comes out on `stdout`.
    const quoted = argv.map((arg) => `'${arg.replaceAll("'", "'\\''")}'`).join(' ');
    const child = tty
      ? spawn('script', ['-qefc', quoted, '/dev/null'], { stdio: ['ignore', 'pipe', 'pipe'] })
      : spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), REFUSED_EXIT_MS);
    const [code] = (await once(child, 'exit')) as [number | null];
    clearTimeout(timer);
    return { code, stdout, stderr, ms: performance.now() - started };
  }

  it('3 nodes serve over TLS as their user, fail over on SIGKILL, and the history checker finds nothing', async () => {
    const leaseMs = 30_000;
    const group = await startTicketingNodes({ etcdEndpoints: cluster.endpoints, extraArgs: cluster.ticketingArgs });
    const load = startLoad(group.addresses, { workers: 4, keys: 8, leaseMs });
    try {
      const leader = await waitForLeader(group.nodes, { timeoutMs: 15_000 });
      const reply = await ask(leader.address, 'A held keeper 0');
      expect(reply).toMatch(/^A \d+ keeper held$/);
      await sleep(500);
      const before = load.grants.length;
      await leader.kill('SIGKILL');
      const next = await waitForLeader(group.nodes, { timeoutMs: 15_000, not: leader });
      // The grant acknowledged by the dead leader is still held at the new one.
      expect(await ask(next.address, 'A held thief 0')).toBe('T thief held');
      const deadline = Date.now() + 10_000;
      while (load.grants.length < before + 20 && Date.now() < deadline) await sleep(20);
      expect(load.grants.length, 'grants after the failover').toBeGreaterThanOrEqual(before + 20);
    } finally {
      await load.stop();
      await group.stop(2_000);
    }
    expect(lostGrants(load.grants)).toEqual([]);
    checkHistory(load.grants, leaseMs);
  }, 90_000);

  it('nodes serving mutual TLS: a client listing a follower first follows M to the leader over TLS', async () => {
    const server = await cluster.ca!.issue({ name: 'ticketing-serve', hosts: ['127.0.0.1'], usage: ['serverAuth'] });
    const clientCert = await cluster.ca!.issue({ name: 'ticketing-user', usage: ['clientAuth'] });
    const group = await startTicketingNodes({
      etcdEndpoints: cluster.endpoints,
      extraArgs: [
        ...cluster.ticketingArgs,
        ...['--tls-cert', server.certFile, '--tls-key', server.keyFile, '--tls-ca', cluster.ca!.certFile],
      ],
    });
    const tls = { ca: cluster.ca!.cert, cert: clientCert.cert, key: clientCert.key };
    try {
      const leader = await waitForLeader(group.nodes, { timeoutMs: 15_000, tls });
      const followers = group.nodes.filter((n) => n !== leader).map((n) => n.address);
      const viaFollower = new TicketClient({ addresses: [...followers, leader.address], tls });
      try {
        const hold = await viaFollower.hold('tls-redirect', { waitMs: 5_000 });
        expect(hold.token).toBeGreaterThan(0n);
        expect((await hold.release()).status).toBe('released');
      } finally {
        viaFollower.destroy();
      }
    } finally {
      await group.stop(2_000);
    }
  }, 60_000);

  it('a user without permission on the prefix: exit 1, saying so, within the bound', async () => {
    const passwordFile = await cluster.addUser('stranger', { prefix: '/elsewhere/' });
    const result = await serveRefused({ '--etcd-user': 'stranger', '--etcd-password-file': passwordFile });
    expect(result.code).toBe(1);
    expect(fatal(result.stderr)).toMatch(/user "stranger" may not read and write the prefix \/ticketing-refused\//);
    expect(result.ms).toBeLessThan(REFUSED_EXIT_MS);
  }, 30_000);

  it('a wrong password: exit 1, saying so, and the password appears nowhere', async () => {
    const wrong = join(cluster.dir, 'wrong-password');
    writeFileSync(wrong, 'not-the-password-x7q\n', { mode: 0o600 });
    const result = await serveRefused({ '--etcd-password-file': wrong });
    expect(result.code).toBe(1);
    expect(fatal(result.stderr)).toMatch(/etcd refused user "ticketing": wrong password or no such user/);
    expect(result.stdout + result.stderr).not.toContain('not-the-password-x7q');
  }, 30_000);

  it('no client certificate, or one from a CA etcd does not trust: exit 1 with the TLS reason', async () => {
    const bare = await serveRefused({ '--etcd-cert': null, '--etcd-key': null });
    expect(bare.code).toBe(1);
    expect(fatal(bare.stderr)).toMatch(/TLS: etcd refused this node's client certificate/);
    const foreign = await foreignCa.issue({ name: 'foreign-client', usage: ['clientAuth'] });
    const untrusted = await serveRefused({ '--etcd-cert': foreign.certFile, '--etcd-key': foreign.keyFile });
    expect(untrusted.code).toBe(1);
    expect(fatal(untrusted.stderr)).toMatch(/TLS: etcd refused this node's client certificate/);
  }, 30_000);

  it("etcd's certificate from a CA the node was not given (or the system CAs): exit 1 with the TLS reason", async () => {
    const wrongCa = await serveRefused({ '--etcd-ca': foreignCa.certFile });
    expect(wrongCa.code).toBe(1);
    expect(fatal(wrongCa.stderr)).toMatch(/TLS: unable to verify the first certificate/);
    const systemCas = await serveRefused({ '--etcd-ca': null });
    expect(systemCas.code).toBe(1);
    expect(fatal(systemCas.stderr)).toMatch(/TLS: unable to verify the first certificate/);
  }, 30_000);

  it('no user on an etcd with auth on, but a client certificate: exit 1, naming its CN as the user', async () => {
    const result = await serveRefused({ '--etcd-user': null, '--etcd-password-file': null });
    expect(result.code).toBe(1);
    // Its client certificate names it (etcd takes the CN as the user): a permission, not a login.
    expect(fatal(result.stderr)).toMatch(/user ".+" \(its client certificate's CN\) may not read and write/);
    expect(result.stderr).toContain('"code":"ETICKETETCDPERMISSION"');
    // Every line on stderr is JSON (a pipe is no terminal: no plain line), grpc's warnings included.
    for (const line of result.stderr.split('\n').filter((l) => l !== ''))
      expect(() => JSON.parse(line) as unknown).not.toThrow();
    // A person at a terminal gets one plain line besides the JSON ones.
    const atTerminal = await serveRefused({ '--etcd-user': null, '--etcd-password-file': null }, { tty: true });
    expect(atTerminal.code).toBe(1);
    const plain = atTerminal.stdout.split(/\r?\n/).filter((line) => line.startsWith('ticketing: '));
    expect(plain).toHaveLength(1);
    expect(plain[0]).toMatch(/^ticketing: etcd: user ".+" \(its client certificate's CN\) may not read and write/);
  }, 30_000);
});
