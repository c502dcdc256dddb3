// Ticketing cluster demo: 3 etcd members and 3 Ticketing nodes on loopback, three clients taking
// turns on three keys. We SIGKILL the leader while they work, and watch a new leader take over with
// every acknowledged grant intact: each holder's exact-token release still succeeds there.
// With `-- --tls`, everything speaks TLS: etcd runs secure (client certificates, auth on) and the
// nodes reach it as their own etcd user; the nodes serve mutual TLS, and the clients present
// certificates from the same test CA.
import { channel } from 'node:diagnostics_channel';
import { join } from 'node:path';
import { findEtcd, ROOT, startEtcdCluster, startTicketingNodes, waitForLeader } from '../test/cluster/harness.mjs';

const TLS = process.argv.includes('--tls');
const LEASE_MS = 5_000;
const KEYS = ['orders', 'invoices', 'payments'];
const WAIT_MS = 1_500;
const CLIENTS = ['agent-A', 'agent-B', 'agent-C'];
const start = Date.now();
const stamp = (at = Date.now()) => `[${String(at - start).padStart(5)} ms]`;
const say = (text, at) => console.log(`${stamp(at)} ${text}`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

let etcd;
let group;
let stopping = false;
async function stopAll() {
  stopping = true;
  await group?.stop(3_000);
  await etcd?.stop();
}
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.once(signal, () => {
    console.log('\ninterrupted: stopping the nodes and etcd, removing temp dirs');
    stopAll().finally(() => process.exit(signal === 'SIGINT' ? 130 : 143));
  });
}

const found = await findEtcd();
if (!found.binary) {
  console.error(`demo:cluster needs etcd: ${found.reason}`);
  process.exit(2);
}
const { TicketClient } = await import(join(ROOT, 'ticketing', 'dist', 'client.js'));

etcd = await startEtcdCluster({ members: 3, secure: TLS });
say(
  `etcd: 3 members on ${etcd.endpoints.map((u) => u.replace(/^https?:\/\//, '')).join(', ')} (data in ${etcd.dir})` +
    (TLS ? '; TLS with client certificates, auth on, Ticketing logs in as its own user' : ''),
);
// Under --tls: a server certificate for the nodes and a client certificate for the clients.
const [serverCert, clientCert] = TLS
  ? [
      await etcd.ca.issue({ name: 'ticketing-server', hosts: ['127.0.0.1', 'localhost'], usage: ['serverAuth'] }),
      await etcd.ca.issue({ name: 'ticketing-client', usage: ['clientAuth'] }),
    ]
  : [];
const clientTls = TLS ? { ca: etcd.ca.cert, cert: clientCert.cert, key: clientCert.key } : undefined;
const serveTls = TLS
  ? ['--tls-cert', serverCert.certFile, '--tls-key', serverCert.keyFile, '--tls-ca', etcd.ca.certFile]
  : [];
group = await startTicketingNodes({
  count: 3,
  etcdEndpoints: etcd.endpoints,
  leaderTtl: '2s',
  lease: `${LEASE_MS}ms`,
  extraArgs: [...etcd.ticketingArgs, ...serveTls],
});
const name = (address) => `node-${group.addresses.indexOf(address)}`;
say(
  `Ticketing: ${group.nodes.map((n) => `${name(n.address)} ${n.address} (pid ${n.pid})`).join(', ')}; lease ${LEASE_MS / 1000} s` +
    (TLS ? '; mutual TLS for clients' : ''),
);
const leader = await waitForLeader(group.nodes, { timeoutMs: 15_000, tls: clientTls });
say(`${name(leader.address)} is the leader`);

// Everything the clients saw. A grant is settled when its release gave a definite answer.
const grants = [];
let killedAt;
let firstGrantAfterKill;
const lastToken = new Map();
let tokenViolations = 0;

// Each client reports when it starts following another node (an L, or an M after a reconnect).
const following = new Map();
channel('ticketing:client:leader').subscribe(({ client, address }) => {
  const who = following.get(client);
  if (!who || !address || who.address === address) return;
  who.address = address;
  if (killedAt !== undefined) say(`${who.name}: now follows ${name(address)} (${address})`);
});

async function releaseDefinitely(client, grant) {
  for (let attempt = 0; ; attempt++) {
    try {
      const result = await client.release(grant.key, grant.token);
      grant.released = result.status;
      grant.releasedAt = Date.now();
      return;
    } catch (error) {
      // Indeterminate: the node died with the release in flight. Ask again with the same token:
      // the new leader still has the grant (or the release went through before the kill).
      if (attempt === 0) {
        grant.releaseIndeterminate = true;
        say(`${grant.owner}: release ${grant.key} token ${grant.token} has no answer (${error.code}); retrying`);
      }
      if (Date.now() - grant.ackAt > LEASE_MS + 10_000) {
        grant.released = 'unknown';
        return;
      }
      await sleep(100);
    }
  }
}

async function work(clientName, index) {
  const client = new TicketClient({
    port: leader.port,
    addresses: group.addresses,
    tls: clientTls,
    leaseMs: LEASE_MS,
    connectTimeoutMs: 5_000,
    responseTimeoutMs: 3_000,
    backoff: { initialMs: 20, maxMs: 200 },
    errorBackoffMs: { no_leader: 50, not_active: 50 },
  });
  following.set(client, { name: clientName, address: leader.address });
  let outage = false;
  for (let turn = index; !stopping; turn++) {
    const key = KEYS[turn % KEYS.length];
    let result;
    try {
      result = await client.acquire(key, { waitMs: WAIT_MS, owner: `${clientName}.${turn}` });
    } catch (error) {
      // In flight or queued at the dead leader, or sent to a node that has no leader yet. If the
      // old leader committed the grant, the key stays held until its lease runs out (by design).
      if (!outage) {
        say(
          `${clientName}: acquire ${key} has no answer (${error.cause?.serverCode ?? error.reason ?? error.code}); ` +
            'retrying until a leader answers (further failures not shown)',
        );
      }
      outage = true;
      await sleep(100);
      continue;
    }
    outage = false;
    if (result.status !== 'acquired') {
      say(`${clientName}: ${key} ${result.status} (still held after ${WAIT_MS} ms: next key)`);
      continue;
    }
    const grant = { owner: clientName, key, token: result.token, ackAt: Date.now() };
    grants.push(grant);
    if ((lastToken.get(key) ?? 0n) >= grant.token) tokenViolations++;
    lastToken.set(key, grant.token);
    if (killedAt !== undefined && firstGrantAfterKill === undefined) {
      firstGrantAfterKill = grant;
      say(
        `${clientName}: A ${key} token ${grant.token}   ← first grant after the kill: takeover took ${grant.ackAt - killedAt} ms`,
      );
    } else {
      say(`${clientName}: A ${key} token ${grant.token}`);
    }
    await sleep(250); // the work the lease protects
    await releaseDefinitely(client, grant);
    const note =
      grant.heldAtKill && grant.released === 'released'
        ? '   ← granted by the old leader, released at the new one'
        : '';
    say(`${clientName}: R ${key} token ${grant.token} → ${grant.released}${note}`);
    await sleep(150);
  }
  await client.close();
}

const workers = CLIENTS.map((clientName, i) => work(clientName, i));

await sleep(2_500);
const holding = grants
  .filter((g) => g.released === undefined)
  .map((g) => `${g.owner} holds ${g.key}`)
  .join(', ');
killedAt = Date.now();
for (const grant of grants) if (grant.released === undefined) grant.heldAtKill = true;
say(`kill -9 ${name(leader.address)} (pid ${leader.pid}), the leader${holding ? `, while ${holding}` : ''}`);
await leader.kill('SIGKILL');
const newLeader = await waitForLeader(group.nodes, { timeoutMs: 15_000, not: leader, tls: clientTls });
say(`${name(newLeader.address)} is the new leader (answers as leader ${Date.now() - killedAt} ms after the kill)`);

// Let the clients work on the new leader for a while, then restart the dead node.
while (firstGrantAfterKill === undefined && Date.now() - killedAt < 15_000) await sleep(50);
await sleep(1_500);
await leader.restart();
say(`${name(leader.address)} restarted (pid ${leader.pid}): it rejoins as a follower`);
await sleep(1_000);
stopping = true;
await Promise.race([Promise.all(workers), new Promise((resolve) => setTimeout(resolve, 15_000).unref())]);

// The audit: every acknowledged grant ended with a definite answer to its exact-token release.
const acrossKill = grants.filter((g) => g.heldAtKill);
const released = grants.filter((g) => g.released === 'released');
const notHeld = grants.filter((g) => g.released === 'not-held');
const expiredByDesign = notHeld.filter((g) => g.releasedAt - g.ackAt >= LEASE_MS);
// An R in flight at the kill may have been committed by the old leader, its reply lost with it:
// the retry then finds nothing to release. That is the release taking effect, not a lost grant.
const releasedBeforeDeath = notHeld.filter((g) => g.releaseIndeterminate && !expiredByDesign.includes(g));
const lost = grants.filter(
  (g) => g.released !== 'released' && !expiredByDesign.includes(g) && !releasedBeforeDeath.includes(g),
);
console.log('');
console.log(
  `grants acknowledged: ${grants.length}; released with R: ${released.length}; ` +
    `R in flight at the kill, then N on retry (released by the old leader): ${releasedBeforeDeath.length}; ` +
    `expired by design (lease ran out first): ${expiredByDesign.length}; lost: ${lost.length}`,
);
console.log(
  `held across the kill: ${acrossKill.length} (${acrossKill.map((g) => `${g.owner} ${g.key} → ${g.released}`).join(', ') || 'none'})`,
);
console.log(
  `tokens strictly increasing per key: ${tokenViolations === 0 ? 'yes' : `NO (${tokenViolations} violations)`}`,
);
console.log(
  `takeover: ${firstGrantAfterKill ? `${firstGrantAfterKill.ackAt - killedAt} ms from the kill to the first grant` : 'NO grant within 15 s'}`,
);
await stopAll();
console.log('stopped: nodes, etcd members; temp dirs removed');
if (lost.length > 0 || tokenViolations > 0 || !firstGrantAfterKill) process.exitCode = 1;
