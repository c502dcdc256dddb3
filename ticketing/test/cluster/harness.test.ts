/** The cluster harness itself: a real 3-member etcd on loopback, member kills, the TCP proxy. */
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, rmSync } from 'node:fs';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  findEtcd,
  startEtcdCluster,
  startTcpProxy,
  startTicketingNodes,
  TICKETING_CLI,
  type EtcdCluster,
  type TcpProxy,
} from './harness.mjs';

const etcd = await findEtcd();
if (etcd.reason) console.log(`cluster harness tests skipped: ${etcd.reason}`);

/** Whether the built CLI has cluster mode yet (the harness's node helpers need it). */
function clusterCliReason(): string | undefined {
  if (!existsSync(TICKETING_CLI)) return `${TICKETING_CLI} is not built`;
  try {
    const help = execFileSync(process.execPath, [TICKETING_CLI, 'serve', '--help'], {
      encoding: 'utf8',
      timeout: 10_000,
    });
    return help.includes('--cluster') ? undefined : '`ticketing serve --help` does not list --cluster yet';
  } catch (error) {
    return `ticketing serve --help failed: ${(error as Error).message}`;
  }
}

const b64 = (text: string): string => Buffer.from(text).toString('base64');

async function etcdPost(endpoint: string, path: string, body: object): Promise<Record<string, unknown>> {
  const response = await fetch(`${endpoint}${path}`, {
    method: 'POST',
    body: JSON.stringify(body),
    headers: { 'content-type': 'application/json' },
    signal: AbortSignal.timeout(3_000),
  });
  expect(response.status).toBe(200);
  return (await response.json()) as Record<string, unknown>;
}

const put = (endpoint: string, key: string, value: string) =>
  etcdPost(endpoint, '/v3/kv/put', { key: b64(key), value: b64(value) });

/** The value of `key` as `endpoint` has it (serializable: that member's own copy, no leader round trip). */
async function localValue(endpoint: string, key: string): Promise<string | undefined> {
  const body = await etcdPost(endpoint, '/v3/kv/range', { key: b64(key), serializable: true });
  const kvs = body.kvs as Array<{ value: string }> | undefined;
  return kvs?.[0] ? Buffer.from(kvs[0].value, 'base64').toString() : undefined;
}

const processExists = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe.skipIf(etcd.reason !== undefined)('etcd cluster harness', () => {
  let cluster: EtcdCluster;
  const pidsSeen = new Set<number>();
  const remember = () => cluster.members.forEach((m) => m.pid && pidsSeen.add(m.pid));

  beforeAll(async () => {
    cluster = await startEtcdCluster({ members: 3 });
    remember();
  });
  afterAll(async () => {
    const dir = cluster?.dir;
    await cluster?.stop();
    // stop() leaves no member behind and no data dir.
    for (const pid of pidsSeen) expect(processExists(pid), `etcd pid ${pid} still running`).toBe(false);
    if (dir) expect(existsSync(dir)).toBe(false);
  });

  it('starts three healthy members on distinct loopback ports with one leader', async () => {
    expect(cluster.members).toHaveLength(3);
    expect(new Set(cluster.endpoints).size).toBe(3);
    for (const endpoint of cluster.endpoints) expect(endpoint).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    for (const member of cluster.members) expect(await member.healthy()).toBe(true);
    const leader = await cluster.leaderIndex();
    expect([0, 1, 2]).toContain(leader);
    // One cluster: a write through one member is replicated to every other member's copy.
    await put(cluster.endpoints[0]!, 'harness/replicated', 'yes');
    for (const endpoint of cluster.endpoints) {
      await expect.poll(() => localValue(endpoint, 'harness/replicated'), { timeout: 5_000 }).toBe('yes');
    }
  });

  it('kills a follower member and restarts it on its data dir; it catches up', async () => {
    const leader = await cluster.waitForLeader();
    const follower = (leader + 1) % 3;
    const member = cluster.members[follower]!;
    const oldPid = member.pid!;
    await cluster.kill(follower);
    expect(member.alive).toBe(false);
    expect(processExists(oldPid)).toBe(false);
    // The other two are a majority: writes still commit while it is down.
    await put(cluster.endpoints[leader]!, 'harness/while-down', 'written');
    await cluster.restart(follower);
    remember();
    expect(member.pid).not.toBe(oldPid);
    expect(await member.healthy()).toBe(true);
    await expect.poll(() => localValue(member.clientUrl, 'harness/while-down'), { timeout: 5_000 }).toBe('written');
    // Same data dir: what it had before the kill is still there.
    expect(await localValue(member.clientUrl, 'harness/replicated')).toBe('yes');
  });

  it("reports a different leader after etcd's leader is SIGKILLed, and the old one rejoins", async () => {
    const before = await cluster.waitForLeader();
    await cluster.kill(before);
    const after = await cluster.waitForLeader({ not: before, timeoutMs: 10_000 });
    expect(after).not.toBe(before);
    expect(cluster.members[after]!.alive).toBe(true);
    await cluster.restart(before);
    remember();
    await cluster.waitHealthy();
    expect(await cluster.leaderIndex()).toBeGreaterThanOrEqual(0);
  });

  describe('TCP proxy', () => {
    let echo: net.Server;
    let proxy: TcpProxy;
    beforeAll(async () => {
      echo = net.createServer((socket) => socket.pipe(socket));
      echo.listen(0, '127.0.0.1');
      await once(echo, 'listening');
      proxy = await startTcpProxy('127.0.0.1', (echo.address() as net.AddressInfo).port);
    });
    afterAll(async () => {
      await proxy?.close();
      echo?.close();
    });

    /** Connects through the proxy; resolves 'echoed', 'refused', 'reset' or 'silent' (no reply in `ms`). */
    /** What a new connection gets within `ms`: give an expected echo room (it comes as soon as it
     * can), and an expected silence a short while. */
    function tryEcho(ms = 5_000): Promise<string> {
      return new Promise((resolve) => {
        const socket = net.connect(proxy.port, '127.0.0.1');
        const done = (outcome: string) => {
          clearTimeout(timer);
          socket.destroy();
          resolve(outcome);
        };
        const timer = setTimeout(() => done('silent'), ms);
        socket.on('connect', () => socket.write('ping\n'));
        socket.on('data', (data) => done(String(data) === 'ping\n' ? 'echoed' : `got ${String(data)}`));
        socket.on('error', (error: NodeJS.ErrnoException) => done(error.code === 'ECONNREFUSED' ? 'refused' : 'reset'));
        socket.on('close', () => done('reset'));
      });
    }

    async function openEcho(): Promise<net.Socket> {
      const socket = net.connect(proxy.port, '127.0.0.1');
      await once(socket, 'connect');
      socket.write('hello\n');
      await once(socket, 'data');
      return socket;
    }

    it('forwards, refuses while cut in refuse mode (resetting open connections), and forwards after restore', async () => {
      expect(await tryEcho()).toBe('echoed');
      const open = await openEcho();
      const closed = once(open, 'close');
      open.on('error', () => {});
      await proxy.cut({ mode: 'refuse' });
      await closed;
      expect(await tryEcho()).toBe('refused');
      await proxy.restore();
      expect(await tryEcho()).toBe('echoed');
    });

    it('blackholes new connections (accepted, never answered) and stalls open ones without a reset', async () => {
      const open = await openEcho();
      let closedEarly = false;
      open.on('close', () => (closedEarly = true));
      open.on('error', () => {});
      let echoedWhileCut = false;
      open.on('data', () => (echoedWhileCut = true));
      const acceptedBefore = proxy.accepted;
      await proxy.cut({ mode: 'blackhole', existing: 'stall' });
      expect(await tryEcho(300)).toBe('silent');
      expect(proxy.accepted).toBe(acceptedBefore + 1);
      open.write('lost\n');
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(echoedWhileCut).toBe(false);
      expect(closedEarly).toBe(false);
      // Restore resets the stalled connection (its bytes were dropped) and forwards new ones.
      const closed = once(open, 'close');
      await proxy.restore();
      await closed;
      expect(await tryEcho()).toBe('echoed');
    });

    it('carries etcd traffic and cuts it', async () => {
      const target = new URL(cluster.endpoints[0]!);
      const etcdProxy = await startTcpProxy('127.0.0.1', Number(target.port));
      try {
        const health = (ms: number) =>
          fetch(`http://${etcdProxy.address}/health`, { signal: AbortSignal.timeout(ms) }).then(
            (r) => r.status,
            (e: Error) => e.name,
          );
        expect(await health(3_000)).toBe(200);
        await etcdProxy.cut({ mode: 'blackhole' });
        expect(await health(300)).toBe('TimeoutError');
        await etcdProxy.restore();
        expect(await health(3_000)).toBe(200);
      } finally {
        await etcdProxy.close();
      }
    });
  });

  it('kills what it started when its own process is SIGKILLed (no exit hook runs)', async () => {
    const harnessUrl = new URL('./harness.mjs', import.meta.url).href;
    const script = `const h = await import(${JSON.stringify(harnessUrl)});
      const c = await h.startEtcdCluster({ members: 1 });
      console.log(JSON.stringify({ pid: c.members[0].pid, dir: c.dir }));
      setInterval(() => {}, 1000);`;
    const parent = spawn(process.execPath, ['--input-type=module', '-e', script], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    parent.stdout.on('data', (chunk) => (out += chunk));
    await expect.poll(() => out.includes('\n'), { timeout: 20_000 }).toBe(true);
    const { pid, dir } = JSON.parse(out) as { pid: number; dir: string };
    try {
      expect(processExists(pid)).toBe(true);
      parent.kill('SIGKILL');
      await once(parent, 'exit');
      await expect.poll(() => processExists(pid), { timeout: 5_000 }).toBe(false);
    } finally {
      if (processExists(pid)) process.kill(pid, 'SIGKILL');
      rmSync(dir, { recursive: true, force: true }); // its exit hook could not run
    }
  });

  const cliReason = etcd.reason === undefined ? clusterCliReason() : undefined;
  if (cliReason) console.log(`cluster harness: Ticketing node test skipped: ${cliReason}`);
  it.skipIf(cliReason !== undefined)(
    'starts three Ticketing nodes; exactly one answers as leader; a new one after a kill',
    async () => {
      const group = await startTicketingNodes({ count: 3, etcdEndpoints: cluster.endpoints, leaderTtl: '1s' });
      try {
        const leader = await group.waitForLeader({ timeoutMs: 10_000 });
        expect(group.addresses).toContain(leader.address);
        await leader.kill('SIGKILL');
        const next = await group.waitForLeader({ timeoutMs: 10_000, not: leader });
        expect(next.address).not.toBe(leader.address);
      } finally {
        await group.stop();
      }
      for (const node of group.nodes) expect(node.alive).toBe(false);
    },
  );
});
