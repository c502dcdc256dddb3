/**
 * The defaults the docs promise, each shown on a server given no value for it: the 5 s sweep and
 * the 10 s auth timeout on fake timers (real time would make the test that slow), TCP keep-alive by
 * the kernel's own account of the server's socket (/proc/net/tcp).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { afterEach, describe, expect, test, vi } from 'vitest';
import { type TicketServer, type TicketServerOptions } from '../src/server/server.js';
import { LineSocket, startServer, tokenOf } from './helpers.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  vi.useRealTimers();
  while (cleanups.length > 0) await cleanups.pop()!();
});

async function server(options: TicketServerOptions = {}): Promise<{ server: TicketServer; port: number }> {
  const started = await startServer(options);
  cleanups.push(started.close);
  return started;
}

async function connect(port: number): Promise<LineSocket> {
  const socket = await LineSocket.connect(port);
  cleanups.push(() => socket.destroy());
  return socket;
}

/** Waits for `condition` on turns of the event loop (the faked timers never fire by themselves),
 * bounded by the wall clock, which is not faked. */
async function untilOnLoop(condition: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setImmediate(resolve));
  }
}

describe('defaults the docs promise', () => {
  test('an expired key without waiters is swept every 5 s', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    let now = 1_700_000_000_000;
    const { port, server: s } = await server({ leaseMs: 1_000, clock: () => now });
    const c = await connect(port);
    c.write('A k o 0\n');
    tokenOf(await c.readLine());
    now += 1_000; // expired, and nobody asks for it
    vi.advanceTimersByTime(4_999);
    expect(s.inspect('k')).toBeDefined();
    vi.advanceTimersByTime(1);
    expect(s.inspect('k')).toBeUndefined();
  });

  test('with a secret, a connection that sends no H is closed after 10 s', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const { port, server: s } = await server({ secret: 'opensesame' });
    const c = await connect(port);
    await untilOnLoop(() => s.stats().connections === 1, 'the server to accept the connection');
    vi.advanceTimersByTime(9_999);
    await new Promise((resolve) => setImmediate(resolve));
    expect(c.received.length).toBe(0);
    expect(c.closed).toBe(false);
    vi.advanceTimersByTime(1);
    // readLine's own bound is a faked timer too: wait on the loop instead.
    await untilOnLoop(() => c.closed, 'the connection to close');
    expect(c.lines).toEqual(['E auth_failed no H line in time']);
  });

  test("TCP keep-alive is on for the server's connections, first probe after 30 s idle", async () => {
    const { port, server: s } = await server();
    const c = await connect(port);
    await untilOnLoop(() => s.stats().connections === 1, 'the server to accept the connection');
    // /proc/net/tcp: local and remote address as hex ip:port, then the timer (2: keep-alive) and
    // when it fires, in clock ticks.
    const hexPort = (n: number): string => n.toString(16).toUpperCase().padStart(4, '0');
    const row = readFileSync('/proc/net/tcp', 'utf8')
      .split('\n')
      .map((line) => line.trim().split(/\s+/))
      .find(
        (fields) =>
          fields[1] === `0100007F:${hexPort(port)}` && fields[2] === `0100007F:${hexPort(c.socket.localPort!)}`,
      );
    expect(row, 'the server side of the connection in /proc/net/tcp').toBeDefined();
    const [timer, when] = row![5]!.split(':');
    expect(timer).toBe('02');
    const ticksPerSecond = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }));
    const firstProbeMs = (parseInt(when!, 16) / ticksPerSecond) * 1_000;
    expect(firstProbeMs).toBeGreaterThan(20_000);
    expect(firstProbeMs).toBeLessThanOrEqual(30_000);
  });
});
