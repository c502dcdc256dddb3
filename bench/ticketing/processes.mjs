/**
 * What the Ticketing benchmarks share: the servers they start (Ticketing, Redis, the Node floor) on
 * free loopback ports and stop by PID, the worker process they run a client in, and their figures'
 * formats. Each benchmark is its own file: servers.mjs, clients.mjs, keep.mjs, tls.mjs, cluster.mjs.
 */
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const here = dirname(fileURLToPath(import.meta.url));
export const root = join(here, '..', '..');

/** tls.connect options from `{ ca, cert, key }` PEM file paths (a worker's config is JSON, so paths). */
export function readPemFiles(files) {
  return Object.fromEntries(Object.entries(files).map(([field, file]) => [field, readFileSync(file)]));
}

function which(command) {
  try {
    return execFileSync('sh', ['-c', `command -v ${command}`], { encoding: 'utf8' }).trim() || undefined;
  } catch {
    return undefined;
  }
}

/** The redis-server on PATH; installs nothing (`sh scripts/setup.sh redis` does): exits 2 without it. */
export function findRedis() {
  const found = which('redis-server');
  if (found) return found;
  console.error(
    'bench:ticketing needs redis-server (the comparison peer) on PATH: run sh scripts/setup.sh redis ' +
      '(the benchmark starts its own instance on a free loopback port; the system service need not run).',
  );
  process.exit(2);
}

async function freePort() {
  const server = net.createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Starts a Node server script that prints `listening host:port`; `name` for the error; `ipc`:
 * with an IPC channel (for usage-probe.mjs). */
async function startListening(name, args, { ipc = false } = {}) {
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit', ...(ipc ? ['ipc'] : [])] });
  let text = '';
  for await (const chunk of child.stdout) {
    text += chunk;
    const m = /^listening (\S+):(\d+)$/m.exec(text);
    if (m) return { child, port: Number(m[2]) };
  }
  throw new Error(`${name} exited before listening`);
}

/** A `ticketing serve` on a free loopback port; `flags` are further serve flags (e.g. TLS's). */
export function startTicketing(...flags) {
  const cli = join(root, 'ticketing', 'dist', 'cli.js');
  return startListening('ticketing server', [cli, 'serve', '--host', '127.0.0.1', '--port', '0', ...flags]);
}

/** A `ticketing serve` that answers `usage(server)` with its own CPU and memory (usage-probe.mjs,
 * preloaded). */
export function startProbedTicketing(...flags) {
  const cli = join(root, 'ticketing', 'dist', 'cli.js');
  const args = [
    '--import',
    join(here, 'usage-probe.mjs'),
    cli,
    'serve',
    '--host',
    '127.0.0.1',
    '--port',
    '0',
    ...flags,
  ];
  return startListening('ticketing server', args, { ipc: true });
}

/** The server's `process.cpuUsage()` (µs) and `process.memoryUsage()` (bytes), from its usage probe. */
export async function usage(server) {
  server.child.send('usage');
  const [reply] = await once(server.child, 'message');
  return reply;
}

/** The Node floor, a bare server (bare-server.mjs; `--fifo` for the hot key), started like the Ticketing server. */
export function startFloor(...flags) {
  return startListening('node floor server', [join(here, 'bare-server.mjs'), ...flags]);
}

export async function startRedis(binary) {
  const port = await freePort();
  const args = [
    '--bind',
    '127.0.0.1',
    '--port',
    String(port),
    '--save',
    '',
    '--appendonly',
    'no',
    '--protected-mode',
    'yes',
  ];
  const child = spawn(binary, args, { stdio: ['ignore', 'ignore', 'inherit'] });
  for (let i = 0; i < 100; i++) {
    try {
      const socket = net.connect(port, '127.0.0.1');
      await once(socket, 'connect');
      socket.write('PING\r\n');
      const [data] = await once(socket, 'data');
      socket.destroy();
      if (String(data).startsWith('+PONG')) return { child, port };
    } catch {
      // not up yet
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  child.kill('SIGKILL');
  throw new Error('redis-server did not answer PING');
}

export async function stop(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  process.kill(child.pid, 'SIGTERM');
  const timer = setTimeout(() => process.kill(child.pid, 'SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
}

/** Runs one client benchmark (worker.mjs) in a fresh Node process; resolves its JSON result. */
export async function runInChild(config) {
  const child = spawn(process.execPath, [join(here, 'worker.mjs'), JSON.stringify(config)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.on('data', (chunk) => (out += chunk));
  const [code] = await once(child, 'exit');
  if (code !== 0) throw new Error(`benchmark worker ${config.system}/${config.workload} failed (exit ${code})`);
  return JSON.parse(out);
}

export function medianOf(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

export const fmt = (n) => Math.round(n).toLocaleString('en-US');
export const ms = (n) => n.toFixed(3);
export const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).map(Number);
