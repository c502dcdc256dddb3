/** Test helpers: a raw line client (to test the wire format byte for byte) and a scripted fake
 * server (to drive the client through every reply a server could send). Real sockets, loopback. */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { once } from 'node:events';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import { TicketServer, type TicketServerOptions } from '../src/server/server.js';

export const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export { until } from '../../test/helpers/until.js';

/** A line-oriented view of one socket: everything received is kept as bytes and as lines. */
export class LineSocket {
  readonly socket: net.Socket;
  received = Buffer.alloc(0);
  #lines: string[] = [];
  #consumed = 0;
  #waiters: Array<() => void> = [];
  closed = false;
  readonly closedPromise: Promise<void>;

  /** `answerProbe`: answer the client's leader probe (`W`) with `W`, as a serving node does, and
   * leave it out of `lines` (a fake server that plays the leader). */
  constructor(socket: net.Socket, { answerProbe = false } = {}) {
    this.socket = socket;
    let probesAnswered = 0;
    socket.on('data', (chunk: Buffer) => {
      this.received = Buffer.concat([this.received, chunk]);
      const text = this.received.toString('latin1');
      const parts = text.split('\n');
      parts.pop();
      if (answerProbe) {
        const probes = parts.filter((line) => line === 'W').length;
        for (; probesAnswered < probes; probesAnswered++) socket.write('W\n');
      }
      this.#lines = answerProbe ? parts.filter((line) => line !== 'W') : parts;
      this.#wake();
    });
    socket.on('error', () => {});
    this.closedPromise = new Promise((resolve) =>
      socket.on('close', () => {
        this.closed = true;
        this.#wake();
        resolve();
      }),
    );
  }

  static async connect(port: number, host = '127.0.0.1'): Promise<LineSocket> {
    const socket = net.connect(port, host);
    const line = new LineSocket(socket);
    await once(socket, 'connect');
    return line;
  }

  #wake(): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const wake of waiters) wake();
  }

  /** All complete lines received so far. */
  get lines(): readonly string[] {
    return this.#lines;
  }

  write(text: string | Buffer): void {
    this.socket.write(text);
  }

  /** The next line not yet returned by readLine. */
  async readLine(timeoutMs = 5_000): Promise<string> {
    const deadline = Date.now() + timeoutMs;
    while (this.#consumed >= this.#lines.length) {
      if (this.closed)
        throw new Error(`connection closed; received ${JSON.stringify(this.received.toString('latin1'))}`);
      const left = deadline - Date.now();
      if (left <= 0)
        throw new Error(`no line within ${timeoutMs} ms; received ${JSON.stringify(this.received.toString('latin1'))}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.#waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    return this.#lines[this.#consumed++]!;
  }

  /** Reads `n` lines. */
  async readLines(n: number, timeoutMs = 5_000): Promise<string[]> {
    const out: string[] = [];
    for (let i = 0; i < n; i++) out.push(await this.readLine(timeoutMs));
    return out;
  }

  /** Asserts nothing more arrives for `ms`. */
  async expectSilence(ms: number): Promise<void> {
    const before = this.received.length;
    await sleep(ms);
    if (this.received.length !== before) {
      throw new Error(`unexpected data: ${JSON.stringify(this.received.subarray(before).toString('latin1'))}`);
    }
  }

  async waitClosed(timeoutMs = 5_000): Promise<void> {
    await Promise.race([
      this.closedPromise,
      sleep(timeoutMs).then(() => {
        throw new Error(`connection not closed within ${timeoutMs} ms`);
      }),
    ]);
  }

  destroy(): void {
    this.socket.destroy();
  }
}

/** An in-process TicketServer on a free loopback port, closed by `close()`. */
export async function startServer(
  options: TicketServerOptions = {},
): Promise<{ server: TicketServer; port: number; close: () => Promise<void> }> {
  const server = new TicketServer({ port: 0, ...options });
  const { port } = await server.listen();
  return { server, port, close: () => server.close() };
}

/** A scripted server: the test decides every byte each connection receives. */
export class FakeServer {
  readonly server: net.Server;
  readonly connections: LineSocket[] = [];
  #waiters: Array<() => void> = [];
  port = 0;

  /** `answerProbe` (default true): every connection answers the client's `W` probe by itself. */
  constructor({ answerProbe = true } = {}) {
    this.server = net.createServer((socket) => {
      this.connections.push(new LineSocket(socket, { answerProbe }));
      const waiters = this.#waiters;
      this.#waiters = [];
      for (const wake of waiters) wake();
    });
  }

  async listen(): Promise<number> {
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    this.port = (this.server.address() as net.AddressInfo).port;
    return this.port;
  }

  /** The `index`-th connection accepted (waits for it). */
  async connection(index: number, timeoutMs = 5_000): Promise<LineSocket> {
    const deadline = Date.now() + timeoutMs;
    while (this.connections.length <= index) {
      if (Date.now() > deadline) throw new Error(`no connection #${index} within ${timeoutMs} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 50);
        this.#waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    return this.connections[index]!;
  }

  async close(): Promise<void> {
    for (const c of this.connections) c.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** Spawns `ticketing serve` and waits for its `listening host:port` line. */
export async function spawnServer(
  args: string[] = [],
  env: NodeJS.ProcessEnv = process.env,
): Promise<{
  child: ChildProcessWithoutNullStreams;
  host: string;
  port: number;
  stderr: () => string;
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}> {
  const child = spawn(process.execPath, [CLI, 'serve', '--port', '0', ...args], { env });
  let stderr = '';
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  let out = '';
  const listening = await new Promise<string>((resolve, reject) => {
    child.stdout.on('data', (chunk) => {
      out += chunk;
      if (out.includes('\n')) resolve(out.split('\n')[0]!);
    });
    void exit.then(({ code }) => reject(new Error(`server exited (${code}) before listening: ${stderr}`)));
  });
  const m = /^listening (.+):(\d+)$/.exec(listening);
  if (m === null) throw new Error(`unexpected first line ${JSON.stringify(listening)}`);
  return { child, host: m[1]!, port: Number(m[2]), stderr: () => stderr, exit };
}

/** Runs `ticketing` with arguments and collects its exit and output (for flag errors). */
export async function runCli(
  args: string[],
  timeoutMs = 10_000,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [CLI, ...args]);
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk) => (stdout += chunk));
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  const [code] = (await once(child, 'exit')) as [number | null];
  clearTimeout(timer);
  return { code, stdout, stderr };
}

/** Reads a token out of an `A <token> <owner> <key>` line. */
export function tokenOf(line: string): bigint {
  const m = /^A (\d+) \S+ \S+(?: \d+)?$/.exec(line); // a semaphore grant ends with its slot
  if (m === null) throw new Error(`not an A line: ${JSON.stringify(line)}`);
  return BigInt(m[1]!);
}

/** Deterministic PRNG (mulberry32), so a failure can be replayed from its seed. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** An async iterator's next value, or a failure after `ms` (or when it ended). */
export async function nextValue<T>(it: AsyncIterator<T>, ms = 5_000): Promise<T> {
  const result = await Promise.race([
    it.next(),
    sleep(ms).then(() => {
      throw new Error(`no value within ${ms} ms`);
    }),
  ]);
  if (result.done === true) throw new Error('the iterator ended');
  return result.value;
}
