/** etcd3 and gRPC are loaded by `serve --cluster` only: never by the client or the single-mode
 * server (a child process lists every module it loaded). Plus the cluster flags' usage errors. */
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { CLI, LineSocket } from '../helpers.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

function run(args: string[], timeoutMs = 20_000): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      args,
      { cwd: ROOT, timeout: timeoutMs, killSignal: 'SIGKILL' },
      (error, stdout, stderr) =>
        resolve({ code: error ? ((error as { code?: number }).code ?? null) : 0, stdout, stderr }),
    );
  });
}

describe('etcd3 is loaded lazily', () => {
  it('importing the client and running a single-mode server loads neither etcd3 nor @grpc', async () => {
    const script = `
      import { createRequire } from 'node:module';
      const t = await import('./ticketing/dist/index.js');
      const server = new t.TicketServer({ port: 0 });
      const { port } = await server.listen();
      const client = new t.TicketClient({ port });
      const got = await client.acquire('k', { waitMs: 0 });
      await client.close();
      await server.close();
      const require = createRequire(import.meta.url);
      const loaded = Object.keys(require.cache);
      console.log(JSON.stringify({ status: got.status, loaded }));
    `;
    const { code, stdout, stderr } = await run(['--input-type=module', '-e', script]);
    expect(stderr).toBe('');
    expect(code).toBe(0);
    const { status, loaded } = JSON.parse(stdout) as { status: string; loaded: string[] };
    expect(status).toBe('acquired');
    expect(loaded.filter((path) => /[\\/](etcd3|@grpc|protobufjs)[\\/]/.test(path))).toEqual([]);
  });

  it('the cluster module loads etcd3 (the check above can see it)', async () => {
    const script = `
      import { createRequire } from 'node:module';
      const { createEtcdClient } = await import('./ticketing/dist/cluster/etcd.js');
      const client = await createEtcdClient({ hosts: ['http://127.0.0.1:1'], callTimeoutMs: 100, hostCooldownMs: 100 });
      client.close();
      const require = createRequire(import.meta.url);
      console.log(JSON.stringify(Object.keys(require.cache).some((p) => /[\\\\/]@grpc[\\\\/]/.test(p))));
    `;
    const { stdout } = await run(['--input-type=module', '-e', script]);
    expect(stdout.trim()).toBe('true');
  });
});

describe('serve --cluster usage errors', () => {
  const cases: Array<[string, string[], RegExp]> = [
    ['--cluster without --etcd', ['--cluster', '--advertise', '127.0.0.1:1'], /--cluster needs --etcd/],
    ['--cluster without --advertise', ['--cluster', '--etcd', 'http://127.0.0.1:2379'], /--cluster needs --advertise/],
    [
      '--etcd without a scheme',
      ['--cluster', '--etcd', '127.0.0.1:2379', '--advertise', '127.0.0.1:1'],
      /http:\/\/host:port/,
    ],
    [
      '--etcd with another scheme',
      ['--cluster', '--etcd', 'grpc://127.0.0.1:2379', '--advertise', '127.0.0.1:1'],
      /http:\/\/host:port/,
    ],
    [
      '--advertise without a port',
      ['--cluster', '--etcd', 'http://127.0.0.1:2379', '--advertise', 'host'],
      /host:port/,
    ],
    [
      '--leader-ttl not whole seconds',
      ['--cluster', '--etcd', 'http://127.0.0.1:2379', '--advertise', '127.0.0.1:1', '--leader-ttl', '1500ms'],
      /whole number of seconds/,
    ],
    ['--etcd without --cluster', ['--etcd', 'http://127.0.0.1:2379'], /--etcd needs --cluster/],
    ['--leader-ttl without --cluster', ['--leader-ttl', '2s'], /--leader-ttl needs --cluster/],
    ['--commit-window without --cluster', ['--commit-window', '8'], /--commit-window needs --cluster/],
    [
      '--commit-window out of range',
      ['--cluster', '--etcd', 'http://127.0.0.1:2379', '--advertise', '127.0.0.1:1', '--commit-window', '65'],
      /expected an integer in 1\.\.64/,
    ],
    [
      '--state-file with --cluster',
      ['--cluster', '--etcd', 'http://127.0.0.1:2379', '--advertise', '127.0.0.1:1', '--state-file', '/tmp/x'],
      /--state-file is for single mode/,
    ],
  ];
  it.each(cases)('%s', async (_, args, message) => {
    const { code, stdout, stderr } = await run([CLI, 'serve', '--port', '0', ...args]);
    expect(code).not.toBe(0);
    expect(stdout).toBe('');
    expect(stderr).toMatch(message);
  });

  // The bounds are the library's (cluster/options.ts): its RangeError becomes the usage error.
  it.each([
    ['above 1h', ['--leader-ttl', '3601s'], /the leader TTL must be a whole number of seconds from 1s to 1h/],
    ['below 1s', ['--leader-ttl', '500ms'], /the leader TTL must be a whole number of seconds from 1s to 1h/],
    ['--prefix with a space', ['--prefix', 'a b'], /the prefix must be 1-128 printable ASCII characters/],
  ])('the library refuses the cluster option %s: a usage error, exit 64', async (_, flags, message) => {
    const cluster = ['--cluster', '--etcd', 'http://127.0.0.1:2379', '--advertise', '127.0.0.1:1'];
    const { code, stdout, stderr } = await run([CLI, 'serve', '--port', '0', ...cluster, ...flags]);
    expect(code).toBe(64);
    expect(stdout).toBe('');
    expect(stderr).toMatch(message);
  });

  it('serve --help lists the cluster flags', async () => {
    const { code, stdout } = await run([CLI, 'serve', '--help']);
    expect(code).toBe(0);
    for (const flag of [
      '--cluster',
      '--etcd <urls>',
      '--advertise <host:port>',
      '--prefix <prefix>',
      '--leader-ttl <dur>',
    ])
      expect(stdout).toContain(flag);
  });
});

describe('serve --cluster without a reachable etcd', () => {
  it('prints its listening line at once, answers E not_active, and drains on SIGTERM (exit 0)', async () => {
    const child = spawn(process.execPath, [
      CLI,
      'serve',
      '--port',
      '0',
      '--cluster',
      '--etcd',
      'http://127.0.0.1:1',
      '--advertise',
      '127.0.0.1:7',
    ]);
    try {
      let out = '';
      child.stdout.setEncoding('latin1');
      const listening = new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no listening line: ${out}`)), 15_000);
        child.stdout.on('data', (chunk: string) => {
          out += chunk;
          if (out.includes('\n')) {
            clearTimeout(timer);
            resolve(out);
          }
        });
      });
      const line = await listening;
      expect(line).toMatch(/^listening 127\.0\.0\.1:\d+\n$/);
      const socket = await LineSocket.connect(Number(line.trim().split(':').pop()));
      socket.write('A k o 0\n');
      expect(await socket.readLine()).toMatch(/^E not_active (starting|etcd unreachable)$/);
      await socket.waitClosed();
      const exited = once(child, 'exit');
      child.kill('SIGTERM');
      const [code] = (await Promise.race([
        exited,
        new Promise((_, reject) => setTimeout(() => reject(new Error('no exit')), 10_000)),
      ])) as [number];
      expect(code).toBe(0);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  }, 30_000);
});
