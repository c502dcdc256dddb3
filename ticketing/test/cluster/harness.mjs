/**
 * Cluster harness: a real etcd cluster, controllable TCP proxies and Ticketing cluster nodes, all
 * on loopback, for the cluster tests, the cluster benchmark and the cluster demo.
 *
 * Plain ESM (typed by harness.d.mts) so that .mjs scripts and TypeScript tests share one copy.
 * Every process started here is recorded by PID and killed with SIGKILL when this process exits,
 * even if a test forgot its stop(), and (through setpriv's parent-death signal) when this process
 * is killed outright. Every wait is bounded.
 */
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import {
  accessSync,
  closeSync,
  constants,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createCa } from '../certs.mjs';

export const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
export const TICKETING_CLI = join(ROOT, 'ticketing', 'dist', 'cli.js');

/**
 * etcd timing for tests: heartbeat 50 ms, election timeout 500 ms. Measured on the 2-core test box
 * at load average ~9 (three SIGKILLs of etcd's leader each): a new leader in 0.45–0.79 s, against
 * 0.95–2.0 s with etcd's 100/1000 defaults and 0.28–0.40 s with 25/250. 50/500 keeps the issue's
 * "service back within 5 s of killing etcd's leader" far in reach while leaving a starved member
 * 10 missed heartbeats of slack before it calls an election.
 */
export const ETCD_HEARTBEAT_MS = 50;
export const ETCD_ELECTION_MS = 500;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// ---------------------------------------------------------------------------------------------
// Cleanup: every child and temp dir is recorded; the exit hook kills and removes what is left.

const liveChildren = new Set();
const tempDirs = new Set();
let exitHookInstalled = false;

function installExitHook() {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const child of liveChildren) {
      try {
        process.kill(child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
  });
}

function track(child) {
  installExitHook();
  liveChildren.add(child);
  child.once('exit', () => liveChildren.delete(child));
  return child;
}

// setpriv (util-linux) sets PR_SET_PDEATHSIG and execs the command (same PID): the kernel then
// SIGKILLs the child when this process dies, even by SIGKILL, when no exit hook can run.
let setprivPath;
function spawnTied(command, args, options) {
  setprivPath ??= findOnPath('setpriv') ?? '';
  const child = setprivPath
    ? spawn(setprivPath, ['--pdeathsig', 'KILL', '--', command, ...args], options)
    : spawn(command, args, options);
  return track(child);
}

function makeTempDir(prefix) {
  installExitHook();
  const dir = mkdtempSync(join(tmpdir(), prefix));
  tempDirs.add(dir);
  return dir;
}

function removeTempDir(dir) {
  rmSync(dir, { recursive: true, force: true });
  tempDirs.delete(dir);
}

const isRunning = (child) => child.exitCode === null && child.signalCode === null;

/** Sends `signal` and waits (bounded) for the exit; escalates to SIGKILL after `graceMs`. SIGSTOP
 * and SIGCONT are only sent: the process is meant to live on (and, resumed, be watched). */
export async function killChild(child, signal = 'SIGKILL', graceMs = 5_000) {
  if (!isRunning(child)) return;
  const exited = once(child, 'exit');
  child.kill(signal);
  if (signal === 'SIGSTOP' || signal === 'SIGCONT') return;
  const timer = setTimeout(() => isRunning(child) && child.kill('SIGKILL'), graceMs);
  try {
    await exited;
  } finally {
    clearTimeout(timer);
  }
}

// ---------------------------------------------------------------------------------------------
// Finding etcd

function findOnPath(name) {
  for (const dir of (process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin').split(delimiter)) {
    const candidate = join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // next
    }
  }
  return undefined;
}

/**
 * Finds the `etcd` binary (`ETCD_BIN`, else PATH). Installs nothing: `sh scripts/setup.sh etcd`
 * does that. Resolves `{ binary }` or `{ reason }` (why etcd cannot be had: for a one-line skip
 * message).
 */
export async function findEtcd() {
  const fromEnv = process.env.ETCD_BIN;
  if (fromEnv) return existsSync(fromEnv) ? { binary: fromEnv } : { reason: `ETCD_BIN=${fromEnv} does not exist` };
  const found = findOnPath('etcd');
  if (found) return { binary: found };
  return { reason: 'etcd is not installed: run sh scripts/setup.sh etcd' };
}

// ---------------------------------------------------------------------------------------------
// Ports

/** `count` distinct free loopback ports (all held open together, so none is handed out twice). */
export async function freePorts(count, host = '127.0.0.1') {
  const servers = [];
  try {
    for (let i = 0; i < count; i++) {
      const server = net.createServer();
      server.listen(0, host);
      await once(server, 'listening');
      servers.push(server);
    }
    return servers.map((s) => s.address().port);
  } finally {
    await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  }
}

// ---------------------------------------------------------------------------------------------
// etcd cluster

/** GET (or POST `body` as JSON) and parse the answer; `tls` (ca, cert, key) for an https URL. */
function fetchJson(url, body, timeoutMs = 1_000, tls = undefined) {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const request = (url.startsWith('https:') ? https : http).request(url, {
      method: payload === undefined ? 'GET' : 'POST',
      headers: payload === undefined ? {} : { 'content-type': 'application/json' },
      timeout: timeoutMs,
      ...tls,
    });
    const timer = setTimeout(() => request.destroy(new Error(`${url}: no answer within ${timeoutMs} ms`)), timeoutMs);
    request.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    request.on('response', (response) => {
      let text = '';
      response.setEncoding('utf8');
      response.on('data', (chunk) => (text += chunk));
      response.on('error', reject);
      response.on('end', () => {
        clearTimeout(timer);
        if (response.statusCode !== 200) reject(new Error(`${url}: HTTP ${response.statusCode} ${text.slice(0, 200)}`));
        else {
          try {
            resolve(JSON.parse(text));
          } catch (error) {
            reject(error);
          }
        }
      });
    });
    request.end(payload);
  });
}

function logTail(file, lines = 15) {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

// etcd's own variables would override the flags below: a test cluster takes nothing from the host.
function cleanEnv(extra = {}) {
  const env = {};
  for (const [name, value] of Object.entries(process.env)) if (!/^ETCD(CTL)?_/.test(name)) env[name] = value;
  return { ...env, ...extra };
}

/** The user and role a secure cluster makes for Ticketing, and the root of the prefix it may use
 * (every test prefix, `/ticketing-test-…/`, and the default `/ticketing/` start with it). */
export const SECURE_USER = 'ticketing';
export const SECURE_PREFIX = '/ticketing';

/**
 * Starts `members` etcd members on loopback (free client and peer ports, temp data dirs, a unique
 * cluster token) and waits until every member reports healthy. With `secure`, clients and peers
 * speak TLS with certificates checked against a CA made for the cluster, and auth is enabled.
 * See harness.d.mts for the API.
 */
export async function startEtcdCluster({
  members: count = 3,
  binary,
  heartbeatMs = ETCD_HEARTBEAT_MS,
  electionMs = ETCD_ELECTION_MS,
  startTimeoutMs = 20_000,
  extraArgs = [],
  secure = false,
} = {}) {
  const found = binary === undefined ? await findEtcd() : { binary };
  if (found.binary === undefined) throw new Error(`etcd is not available: ${found.reason}`);
  const etcd = found.binary;
  const etcdctl = secure ? findOnPath('etcdctl') : undefined;
  if (secure && !etcdctl) throw new Error('etcdctl is not installed: run sh scripts/setup.sh etcd');
  const dir = makeTempDir('ticketing-etcd-');
  const ports = await freePorts(count * 2);
  const token = `t-${process.pid}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
  const scheme = secure ? 'https' : 'http';
  const specs = Array.from({ length: count }, (_, i) => ({
    index: i,
    name: `m${i}`,
    clientUrl: `${scheme}://127.0.0.1:${ports[2 * i]}`,
    peerUrl: `${scheme}://127.0.0.1:${ports[2 * i + 1]}`,
    dataDir: join(dir, `m${i}`),
    logFile: join(dir, `m${i}.log`),
  }));
  const pki = secure ? await makeClusterPki(join(dir, 'pki'), specs) : undefined;
  const initialCluster = specs.map((s) => `${s.name}=${s.peerUrl}`).join(',');
  const memberIds = new Map(); // index → etcd member id (decimal string), learned from status

  const members = specs.map((spec) => {
    const member = {
      ...spec,
      child: undefined,
      get pid() {
        return member.child?.pid;
      },
      get alive() {
        return member.child !== undefined && isRunning(member.child);
      },
      spawn() {
        const args = [
          '--name',
          spec.name,
          '--data-dir',
          spec.dataDir,
          '--listen-client-urls',
          spec.clientUrl,
          '--advertise-client-urls',
          spec.clientUrl,
          '--listen-peer-urls',
          spec.peerUrl,
          '--initial-advertise-peer-urls',
          spec.peerUrl,
          '--initial-cluster',
          initialCluster,
          '--initial-cluster-token',
          token,
          '--initial-cluster-state',
          'new',
          '--heartbeat-interval',
          String(heartbeatMs),
          '--election-timeout',
          String(electionMs),
          '--logger',
          'zap',
          ...(pki ? pki.memberArgs(spec) : []),
          ...extraArgs,
        ];
        const log = openSync(spec.logFile, 'a');
        try {
          member.child = spawnTied(etcd, args, { stdio: ['ignore', log, log], env: cleanEnv() });
        } finally {
          closeSync(log);
        }
        member.child.on('error', () => {}); // reported through the health wait and the log
        return member.child;
      },
      kill(signal = 'SIGKILL') {
        return member.child ? killChild(member.child, signal) : Promise.resolve();
      },
      async restart({ timeoutMs = startTimeoutMs } = {}) {
        if (member.alive) await member.kill('SIGKILL');
        member.spawn();
        await waitHealthy([member], timeoutMs);
      },
      async healthy(timeoutMs = 1_000) {
        try {
          const body = await fetchJson(`${spec.clientUrl}/health`, undefined, timeoutMs, pki?.probeTls);
          return body.health === 'true' || body.health === true;
        } catch {
          return false;
        }
      },
      /** This member's view: { memberId, leaderId, raftTerm } from /v3/maintenance/status. */
      async status(timeoutMs = 1_000) {
        const body = await fetchJson(`${spec.clientUrl}/v3/maintenance/status`, {}, timeoutMs, pki?.probeTls);
        const memberId = String(body.header?.member_id ?? '');
        if (memberId) memberIds.set(spec.index, memberId);
        return { memberId, leaderId: String(body.leader ?? '0'), raftTerm: Number(body.raftTerm ?? 0) };
      },
      log: () => logTail(spec.logFile, 1_000_000),
    };
    return member;
  });

  async function waitHealthy(which, timeoutMs) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const states = await Promise.all(which.map(async (m) => m.alive && (await m.healthy(500))));
      if (states.every(Boolean)) return;
      const dead = which.find((m) => !m.alive);
      if (dead || Date.now() > deadline) {
        const why = dead
          ? `member ${dead.name} exited (${dead.child?.exitCode ?? dead.child?.signalCode})`
          : `not every member healthy after ${timeoutMs} ms`;
        const logs = which.map((m) => `--- ${m.logFile}\n${logTail(m.logFile)}`).join('\n');
        throw new Error(`etcd: ${why}\n${logs}`);
      }
      await sleep(50);
    }
  }

  let stopped = false;
  /** Runs etcdctl against the cluster as root (by its client certificate), bounded. */
  const asRoot = async (args, { input } = {}) => {
    const endpoints = members.map((m) => m.clientUrl).join(',');
    const tlsArgs = ['--cacert', pki.ca.certFile, '--cert', pki.root.certFile, '--key', pki.root.keyFile];
    const result = await runWithInput(etcdctl, ['--endpoints', endpoints, ...tlsArgs, ...args], input, 10_000);
    if (!result.ok) throw new Error(`etcdctl ${args.join(' ')}: ${result.stderr.trim() || result.stdout.trim()}`);
    return result.stdout;
  };
  const passwordsDir = join(dir, 'passwords');
  const cluster = {
    dir,
    token,
    members,
    endpoints: members.map((m) => m.clientUrl),
    heartbeatMs,
    electionMs,
    secure: Boolean(secure),
    ca: pki?.ca,
    ticketingArgs: [],
    etcdctl: (args, options) => {
      if (!pki) throw new Error('etcdctl: only on a secure cluster');
      return asRoot(args, options);
    },
    /**
     * Makes etcd user `name` (password written to a 0600 file), with a role that may read and
     * write keys starting with `prefix` (none without one). Resolves the password file's path.
     */
    async addUser(name, { prefix, password = `pw-${name}-${Math.random().toString(36).slice(2)}` } = {}) {
      if (!pki) throw new Error('addUser: only on a secure cluster');
      // The password goes to etcdctl on stdin, never in its argv.
      await asRoot(['user', 'add', name, '--interactive=false'], { input: `${password}\n` });
      if (prefix !== undefined) {
        await asRoot(['role', 'add', name]);
        await asRoot(['role', 'grant-permission', '--prefix=true', name, 'readwrite', prefix]);
        await asRoot(['user', 'grant-role', name, name]);
      }
      mkdirSync(passwordsDir, { recursive: true, mode: 0o700 });
      const file = join(passwordsDir, name);
      writeFileSync(file, `${password}\n`, { mode: 0o600 });
      return file;
    },
    /** Index of the member etcd currently has as leader (as its live members see it), or -1. */
    async leaderIndex({ timeoutMs = 1_000 } = {}) {
      const views = await Promise.all(
        members.map((m) => (m.alive ? m.status(timeoutMs).catch(() => undefined) : undefined)),
      );
      // Votes: the leader id each live member reports; take the one with the highest term.
      let best;
      for (const view of views) {
        if (!view || view.leaderId === '0') continue;
        if (!best || view.raftTerm > best.raftTerm) best = view;
      }
      if (!best) return -1;
      for (const [index, id] of memberIds) if (id === best.leaderId && members[index].alive) return index;
      return -1;
    },
    /** Waits (bounded) until a live leader is known; `not` excludes a member (e.g. a just-killed one). */
    async waitForLeader({ timeoutMs = 10_000, not = -1 } = {}) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const index = await cluster.leaderIndex();
        if (index >= 0 && index !== not) return index;
        if (Date.now() > deadline) throw new Error(`etcd: no leader within ${timeoutMs} ms`);
        await sleep(20);
      }
    },
    waitHealthy: (which = members.filter((m) => m.alive), timeoutMs = startTimeoutMs) => waitHealthy(which, timeoutMs),
    kill: (index, signal = 'SIGKILL') => members[index].kill(signal),
    restart: (index, options) => members[index].restart(options),
    logs: () => members.map((m) => `--- ${m.logFile}\n${logTail(m.logFile)}`).join('\n'),
    async stop() {
      if (stopped) return;
      stopped = true;
      await Promise.all(
        members.map(async (m) => {
          if (m.child?.signalCode === null && m.child.exitCode === null) m.child.kill('SIGCONT');
          await m.kill('SIGKILL');
        }),
      );
      removeTempDir(dir);
    },
    async [Symbol.asyncDispose]() {
      await cluster.stop();
    },
  };

  try {
    for (const member of members) member.spawn();
    await waitHealthy(members, startTimeoutMs);
    await Promise.all(members.map((m) => m.status().catch(() => undefined)));
    if (pki) {
      // Root first (auth enable needs it); root authenticates by its certificate's CN from then on.
      await cluster.addUser('root');
      const passwordFile = await cluster.addUser(SECURE_USER, { prefix: SECURE_PREFIX });
      await asRoot(['auth', 'enable']);
      cluster.ticketingArgs = [
        '--etcd-ca',
        pki.ca.certFile,
        '--etcd-cert',
        pki.node.certFile,
        '--etcd-key',
        pki.node.keyFile,
        '--etcd-user',
        SECURE_USER,
        '--etcd-password-file',
        passwordFile,
      ];
    }
  } catch (error) {
    await cluster.stop();
    throw error;
  }
  return cluster;
}

/**
 * A CA for one cluster, a certificate per member (for its client and peer ports), a client
 * certificate with CN `root` (etcd's client-certificate auth: etcdctl acts as root without a
 * password), one without a CN for the health and status requests (etcd's HTTP gateway refuses a
 * CN while auth is on), and one for Ticketing nodes, whose CN is no etcd user (so a node is known
 * only by its --etcd-user).
 */
async function makeClusterPki(dir, specs) {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const ca = await createCa({ dir, commonName: 'ticketing test etcd CA' });
  const memberCerts = await Promise.all(
    specs.map((spec) => ca.issue({ name: spec.name, commonName: `etcd-${spec.name}`, hosts: ['127.0.0.1'] })),
  );
  const root = await ca.issue({ name: 'root', usage: ['clientAuth'] });
  const probe = await ca.issue({ name: 'probe', commonName: '', usage: ['clientAuth'] });
  const node = await ca.issue({ name: 'ticketing-node', usage: ['clientAuth'] });
  return {
    ca,
    root,
    node,
    probeTls: { ca: ca.cert, cert: probe.cert, key: probe.key },
    memberArgs(spec) {
      const cert = memberCerts[spec.index];
      return [
        '--client-cert-auth',
        '--trusted-ca-file',
        ca.certFile,
        '--cert-file',
        cert.certFile,
        '--key-file',
        cert.keyFile,
        '--peer-client-cert-auth',
        '--peer-trusted-ca-file',
        ca.certFile,
        '--peer-cert-file',
        cert.certFile,
        '--peer-key-file',
        cert.keyFile,
      ];
    },
  };
}

/** execFile with `input` written to the child's stdin; resolves `{ ok, code, stdout, stderr }`. */
function runWithInput(command, args, input, timeoutMs) {
  return new Promise((resolve) => {
    const child = execFile(
      command,
      args,
      { timeout: timeoutMs, env: cleanEnv(), maxBuffer: 1 << 20 },
      (error, stdout, stderr) => resolve({ ok: !error, code: error?.code, stdout, stderr }),
    );
    child.stdin.end(input ?? '');
  });
}

// ---------------------------------------------------------------------------------------------
// Controllable TCP proxy

/**
 * A loopback TCP proxy to `targetHost:targetPort`. `cut({ mode })` destroys the current
 * connections and then either refuses new ones (the listener is closed: connect gets
 * ECONNREFUSED) or blackholes them (accepted, never forwarded, never answered). With
 * `existing: 'stall'` current connections are kept open but silently drop every byte instead
 * (a partition without resets). `restore()` forwards again on the same port.
 */
export async function startTcpProxy(targetHost, targetPort, { host = '127.0.0.1', port = 0 } = {}) {
  const pairs = new Set(); // { client, upstream, stalled }
  const blackholed = new Set();
  let state = 'open'; // 'open' | 'refuse' | 'blackhole'
  let closed = false;
  let accepted = 0;

  const onConnection = (client) => {
    accepted++;
    client.on('error', () => {});
    if (state === 'blackhole') {
      blackholed.add(client);
      client.on('close', () => blackholed.delete(client));
      client.on('data', () => {}); // read and drop, so the peer's writes never block on us
      return;
    }
    if (state !== 'open') {
      client.destroy();
      return;
    }
    const upstream = net.connect(targetPort, targetHost);
    const pair = { client, upstream, stalled: false };
    pairs.add(pair);
    upstream.on('error', () => {});
    const forward = (from, to) => {
      from.on('data', (chunk) => {
        if (pair.stalled) return;
        if (!to.write(chunk)) from.pause();
      });
      to.on('drain', () => from.resume());
      from.on('end', () => pair.stalled || to.end());
      from.on('close', () => {
        if (!pair.stalled) to.destroy();
        pairs.delete(pair);
      });
    };
    forward(client, upstream);
    forward(upstream, client);
  };

  let server = net.createServer(onConnection);
  server.listen(port, host);
  await once(server, 'listening');
  const boundPort = server.address().port;

  const closeServer = () => new Promise((resolve) => (server.listening ? server.close(() => resolve()) : resolve()));

  const proxy = {
    host,
    port: boundPort,
    address: `${host}:${boundPort}`,
    get state() {
      return state;
    },
    get connections() {
      return pairs.size;
    },
    get accepted() {
      return accepted;
    },
    async cut({ mode = 'refuse', existing = 'destroy' } = {}) {
      if (closed) throw new Error('proxy is closed');
      if (mode !== 'refuse' && mode !== 'blackhole')
        throw new TypeError(`cut mode: 'refuse' or 'blackhole', not ${mode}`);
      if (existing !== 'destroy' && existing !== 'stall')
        throw new TypeError(`existing: 'destroy' or 'stall', not ${existing}`);
      state = mode;
      for (const pair of pairs) {
        if (existing === 'stall') {
          pair.stalled = true;
          pair.client.resume();
          pair.upstream.resume();
        } else {
          pair.client.destroy();
          pair.upstream.destroy();
        }
      }
      if (existing === 'destroy') pairs.clear();
      if (mode === 'refuse') await closeServer();
    },
    async restore() {
      if (closed) throw new Error('proxy is closed');
      // Stalled and blackholed connections lost bytes: reset them, so their peers reconnect.
      for (const pair of pairs) {
        if (!pair.stalled) continue;
        pair.client.destroy();
        pair.upstream.destroy();
        pairs.delete(pair);
      }
      for (const socket of blackholed) socket.destroy();
      blackholed.clear();
      if (!server.listening) {
        server = net.createServer(onConnection);
        server.listen(boundPort, host);
        await once(server, 'listening');
      }
      state = 'open';
    },
    async close() {
      if (closed) return;
      closed = true;
      for (const pair of pairs) {
        pair.client.destroy();
        pair.upstream.destroy();
      }
      pairs.clear();
      for (const socket of blackholed) socket.destroy();
      blackholed.clear();
      await closeServer();
    },
    async [Symbol.asyncDispose]() {
      await proxy.close();
    },
  };
  return proxy;
}

// ---------------------------------------------------------------------------------------------
// Ticketing cluster nodes

/** Waits (bounded) for the child's `listening <host>:<port>` line on stdout. */
function waitListening(child, timeoutMs, describe) {
  return new Promise((resolve, reject) => {
    let text = '';
    const finish = (error, value) => {
      clearTimeout(timer);
      child.stdout.off('data', onData);
      child.off('exit', onExit);
      if (error) reject(error);
      else resolve(value);
    };
    const onData = (chunk) => {
      text += chunk;
      const match = /^listening (\S+):(\d+)\s*$/m.exec(text);
      if (match) finish(undefined, { host: match[1], port: Number(match[2]) });
    };
    const onExit = (code, signal) => finish(new Error(`${describe()} exited (${code ?? signal}) before listening`));
    const timer = setTimeout(
      () => finish(new Error(`${describe()}: no "listening" line within ${timeoutMs} ms`)),
      timeoutMs,
    );
    child.stdout.on('data', onData);
    child.once('exit', onExit);
  });
}

/**
 * Spawns `count` `ticketing serve --cluster` nodes on free loopback ports. `etcdEndpoints` is one
 * list for every node, or a function of the node index (e.g. to route one node through a proxy).
 */
export async function startTicketingNodes({
  count = 3,
  etcdEndpoints,
  prefix = `/ticketing-test-${process.pid}-${Date.now().toString(36)}/`,
  leaderTtl = '2s',
  lease = '30s',
  extraArgs = [],
  env = {},
  cli = TICKETING_CLI,
  nodeArgs = [],
  hosts = [],
  execArgv = [],
  startTimeoutMs = 15_000,
  stderr = 'keep',
} = {}) {
  if (!etcdEndpoints) throw new TypeError('startTicketingNodes: etcdEndpoints is required');
  if (!existsSync(cli)) throw new Error(`${cli} does not exist: run npm run build first`);
  const ports = await freePorts(count);
  const endpointsOf = typeof etcdEndpoints === 'function' ? etcdEndpoints : () => etcdEndpoints;

  const nodes = ports.map((port, index) => {
    const host = hosts[index] ?? '127.0.0.1';
    const address = `${host}:${port}`;
    const node = {
      index,
      host,
      port,
      address,
      child: undefined,
      stderr: '',
      get pid() {
        return node.child?.pid;
      },
      get alive() {
        return node.child !== undefined && isRunning(node.child);
      },
      args() {
        return [
          cli,
          'serve',
          '--cluster',
          '--etcd',
          endpointsOf(index).join(','),
          '--advertise',
          address,
          '--prefix',
          prefix,
          '--leader-ttl',
          leaderTtl,
          '--lease',
          lease,
          '--host',
          host,
          '--port',
          String(port),
          ...extraArgs,
          ...(nodeArgs[index] ?? []),
        ];
      },
      async start() {
        const child = spawnTied(process.execPath, [...execArgv, ...node.args()], {
          stdio: ['ignore', 'pipe', stderr === 'inherit' ? 'inherit' : 'pipe'],
          env: { ...process.env, ...env },
        });
        node.child = child;
        node.stderr = '';
        child.stderr?.on('data', (chunk) => {
          node.stderr = (node.stderr + chunk).slice(-16_384);
        });
        child.on('error', () => {});
        const listening = await waitListening(
          child,
          startTimeoutMs,
          () => `ticketing node ${index} (pid ${child.pid})${node.stderr ? `: ${node.stderr.trim().slice(-500)}` : ''}`,
        );
        child.stdout.resume(); // nothing more is expected on stdout; never let the pipe fill
        if (listening.port !== port) throw new Error(`node ${index} listens on ${listening.port}, not ${port}`);
        return node;
      },
      kill(signal = 'SIGKILL') {
        return node.child ? killChild(node.child, signal) : Promise.resolve();
      },
      /** SIGTERM (drain), bounded; SIGKILL after `graceMs`. */
      stop(graceMs = 5_000) {
        if (!node.child) return Promise.resolve();
        if (node.child.signalCode === null && node.child.exitCode === null) node.child.kill('SIGCONT');
        return killChild(node.child, 'SIGTERM', graceMs);
      },
      async restart() {
        if (node.alive) await node.kill('SIGKILL');
        return node.start();
      },
    };
    return node;
  });

  const group = {
    nodes,
    prefix,
    addresses: nodes.map((n) => n.address),
    findLeader: (options) => findLeader(nodes, options),
    waitForLeader: (options) => waitForLeader(nodes, options),
    async stop(graceMs = 5_000) {
      await Promise.all(nodes.map((n) => n.stop(graceMs)));
    },
    async [Symbol.asyncDispose]() {
      await group.stop();
    },
  };
  try {
    await Promise.all(nodes.map((n) => n.start()));
  } catch (error) {
    await Promise.all(nodes.map((n) => n.kill('SIGKILL')));
    throw error;
  }
  return group;
}

export const PROBE_KEY = '__harness_probe__';

/**
 * Asks one node who leads: sends `R __harness_probe__ 1` (releases nothing) and reads one line.
 * Resolves { role: 'leader' } for an R/N reply, { role: 'follower', leader } for `M <addr>`,
 * { role: 'error', code } for `E …`, { role: 'unreachable' } on connect failure or timeout.
 * With `tls` (tls.connect options) it asks over TLS.
 */
export function probeNode(address, { timeoutMs = 1_000, secret, tls: tlsOptions } = {}) {
  const [host, portText] = splitAddress(address);
  return new Promise((resolve) => {
    const port = Number(portText);
    const socket = tlsOptions ? tls.connect({ ...tlsOptions, port, host }) : net.connect(port, host);
    let text = '';
    const done = (result) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(result);
    };
    const timer = setTimeout(() => done({ role: 'unreachable', why: 'timeout' }), timeoutMs);
    socket.on('error', (error) => done({ role: 'unreachable', why: error.code ?? error.message }));
    socket.on(tlsOptions ? 'secureConnect' : 'connect', () =>
      socket.write(`${secret ? `H ${secret}\n` : ''}R ${PROBE_KEY} 1\n`),
    );
    socket.on('data', (chunk) => {
      text += chunk;
      for (const line of text.split('\n').slice(0, -1)) {
        const [kind, first] = line.trimEnd().split(' ');
        if (kind === 'L') continue; // unsolicited leader hint: wait for the answer itself
        if (kind === 'R' || kind === 'N') return done({ role: 'leader' });
        if (kind === 'M') return done({ role: 'follower', leader: first });
        if (kind === 'E') return done({ role: 'error', code: first });
        return done({ role: 'error', code: 'unexpected', line });
      }
    });
    socket.on('close', () => done({ role: 'unreachable', why: 'closed' }));
  });
}

function splitAddress(address) {
  const at = address.lastIndexOf(':');
  return [address.slice(0, at).replace(/^\[|\]$/g, ''), address.slice(at + 1)];
}

/** The node that answers as leader (at most one is expected), or undefined. Only live nodes are asked. */
export async function findLeader(nodes, options = {}) {
  const live = nodes.filter((n) => n.alive !== false);
  const answers = await Promise.all(live.map((n) => probeNode(n.address, options)));
  const leaders = live.filter((_, i) => answers[i].role === 'leader');
  if (leaders.length > 1) throw new Error(`two nodes answer as leader: ${leaders.map((n) => n.address).join(', ')}`);
  return leaders[0];
}

/** Polls findLeader until a leader answers (optionally not `not`), bounded by `timeoutMs`. */
export async function waitForLeader(nodes, { timeoutMs = 10_000, not, ...options } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const leader = await findLeader(nodes, options);
    if (leader && leader !== not) return leader;
    if (Date.now() > deadline) throw new Error(`no ticketing leader within ${timeoutMs} ms`);
    await sleep(25);
  }
}

// ---------------------------------------------------------------------------------------------
// CPU accounting, from /proc/<pid>/stat (utime + stime, in clock ticks)

const CLOCK_TICKS_PER_SECOND = 100; // USER_HZ: 100 on every Linux ABI Node runs on

/** CPU time used so far by `pid` (user + system), in ms; undefined when it cannot be read. */
export function cpuTimeMs(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may contain spaces: fields after it start past the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const utime = Number(fields[11]);
    const stime = Number(fields[12]);
    return ((utime + stime) * 1000) / CLOCK_TICKS_PER_SECOND;
  } catch {
    return undefined;
  }
}
