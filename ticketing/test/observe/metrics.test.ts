/** The metrics of the HTTP endpoint under a scripted workload: every ticketing_ metric moves as its
 * meaning says, two servers in one process keep their own, and promtool finds no problem in them. */
import { execFile } from 'node:child_process';
import { afterEach, describe, expect, test } from 'vitest';
import { TicketClient } from '../../src/client.js';
import { LockLostError } from '../../src/errors.js';
import { sleep, until } from '../helpers.js';
import { sample, startObserved, type Observed } from './support.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

async function observed(...args: Parameters<typeof startObserved>): Promise<Observed> {
  const o = await startObserved(...args);
  cleanups.push(() => o.close());
  return o;
}

function client(port: number): TicketClient {
  const c = new TicketClient({ port });
  cleanups.push(() => c.close());
  return c;
}

const requests = (text: string, op: string, result: string): number | undefined =>
  sample(text, 'ticketing_requests_total', { op, result });

describe('ticketing_ metrics', () => {
  test('requests by outcome, the acquire wait, and the gauges follow a scripted workload', async () => {
    const o = await observed({ leaseMs: 60_000, maxWaitersPerKey: 1 });
    const c = client(o.port);
    const first = await o.scrape();
    for (const [op, result] of [
      ['acquire', 'acquired'],
      ['acquire', 'timeout'],
      ['acquire', 'busy'],
      ['release', 'released'],
      ['release', 'not_held'],
      ['keep', 'kept'],
      ['keep', 'gone'],
    ] as const) {
      expect(requests(first, op, result), `${op} ${result}`).toBe(0);
    }
    expect(sample(first, 'ticketing_expirations_total')).toBe(0);
    expect(sample(first, 'ticketing_is_leader')).toBe(1);

    const N = 25;
    const tokens: bigint[] = [];
    for (let i = 0; i < N; i++) {
      const r = await c.acquire(`k${i}`);
      if (r.status !== 'acquired') throw new Error(r.status);
      tokens.push(r.token);
    }
    let text = await o.scrape();
    expect(requests(text, 'acquire', 'acquired')).toBe(N);
    expect(sample(text, 'ticketing_keys')).toBe(N);
    expect(sample(text, 'ticketing_acquire_wait_seconds_count')).toBe(N);
    expect(sample(text, 'ticketing_acquire_wait_seconds_sum')).toBe(0); // all granted at once

    for (let i = 0; i < 10; i++) expect((await c.release(`k${i}`, tokens[i]!)).status).toBe('released');
    expect((await c.release('k20', tokens[20]! + 1n)).status).toBe('not-held');
    expect((await c.release('k0', tokens[0]!)).status).toBe('not-held');
    expect((await c.acquire('k20', { waitMs: 0 })).status).toBe('timed-out');
    text = await o.scrape();
    expect(requests(text, 'release', 'released')).toBe(10);
    expect(requests(text, 'release', 'not_held')).toBe(2);
    expect(requests(text, 'acquire', 'timeout')).toBe(1);
    expect(sample(text, 'ticketing_keys')).toBe(N - 10);

    // Keeps: two of a held grant, one of a released one.
    await c.renew('k23', tokens[23]!);
    await c.renew('k23', tokens[23]!);
    await expect(c.renew('k0', tokens[0]!)).rejects.toBeInstanceOf(LockLostError);
    text = await o.scrape();
    expect(requests(text, 'keep', 'kept')).toBe(2);
    expect(requests(text, 'keep', 'gone')).toBe(1);

    // A queued request, a busy one behind it (one waiter per key), and the hand-off after 300 ms.
    const waiting = c.acquire('k21', { waitMs: 10_000 });
    await until(() => o.server.stats().waiters === 1);
    expect((await c.acquire('k21', { waitMs: 10_000 })).status).toBe('busy');
    text = await o.scrape();
    expect(sample(text, 'ticketing_waiters')).toBe(1);
    expect(requests(text, 'acquire', 'busy')).toBe(1);
    await sleep(300);
    await c.release('k21', tokens[21]!);
    expect((await waiting).status).toBe('acquired');
    // A wait that runs out.
    expect((await c.acquire('k22', { waitMs: 200 })).status).toBe('timed-out');
    text = await o.scrape();
    expect(requests(text, 'acquire', 'acquired')).toBe(N + 1);
    expect(requests(text, 'acquire', 'timeout')).toBe(2);
    expect(sample(text, 'ticketing_waiters')).toBe(0);
    expect(sample(text, 'ticketing_acquire_wait_seconds_count')).toBe(N + 1);
    expect(sample(text, 'ticketing_acquire_wait_seconds_sum')).toBeGreaterThanOrEqual(0.3);
    expect(sample(text, 'ticketing_acquire_wait_seconds_bucket', { le: '0.25' })).toBe(N);
    expect(sample(text, 'ticketing_acquire_wait_seconds_bucket', { le: '+Inf' })).toBe(N + 1);
    expect(sample(text, 'ticketing_connections')).toBe(o.server.stats().connections);
    expect(sample(text, 'ticketing_connections')).toBeGreaterThan(0);
    // Default process and Node metrics, from prom-client.
    expect(sample(text, 'process_cpu_user_seconds_total')).toBeGreaterThan(0);
    expect(text).toMatch(/^nodejs_eventloop_lag_seconds /m);
  });

  test('a grant that runs out raises ticketing_expirations_total; a release does not', async () => {
    const o = await observed({ leaseMs: 200 });
    const c = client(o.port);
    const held = await c.acquire('e');
    const released = await c.acquire('r');
    if (held.status !== 'acquired' || released.status !== 'acquired') throw new Error('not acquired');
    await c.release('r', released.token);
    // A waiter gets the key when the lease runs out: that ends the grant by expiry.
    expect((await c.acquire('e', { waitMs: 5_000 })).status).toBe('acquired');
    expect(sample(await o.scrape(), 'ticketing_expirations_total')).toBe(1);
  });

  test('grants by mode, and conflicts, are counted apart', async () => {
    const o = await observed();
    const c = client(o.port);
    const first = await o.scrape();
    for (const mode of ['x', 's', 'permit']) expect(sample(first, 'ticketing_grants_total', { mode })).toBe(0);
    expect(requests(first, 'acquire', 'conflict')).toBe(0);
    await c.acquire('x1');
    await c.acquire('s1', { shared: true });
    await c.acquire('s1', { shared: true });
    await c.acquire('p1', { permits: 3 });
    await c.acquire('p1', { permits: 2 }).catch(() => {});
    const text = await o.scrape();
    expect(sample(text, 'ticketing_grants_total', { mode: 'x' })).toBe(1);
    expect(sample(text, 'ticketing_grants_total', { mode: 's' })).toBe(2);
    expect(sample(text, 'ticketing_grants_total', { mode: 'permit' })).toBe(1);
    expect(requests(text, 'acquire', 'conflict')).toBe(1);
  });

  test('two servers in one process keep their own metrics', async () => {
    const a = await observed();
    const b = await observed();
    for (let i = 0; i < 3; i++) await client(a.port).acquire(`a${i}`);
    expect(requests(await a.scrape(), 'acquire', 'acquired')).toBe(3);
    expect(requests(await b.scrape(), 'acquire', 'acquired')).toBe(0);
    expect(sample(await b.scrape(), 'ticketing_keys')).toBe(0);
  });

  test('promtool check metrics passes the whole scrape: exit 0, no warning', async (context) => {
    const promtool = await which('promtool');
    if (promtool === undefined) {
      // scripts/setup.sh installs it (Debian's prometheus package); CI runs setup first.
      context.skip('promtool not installed (sh scripts/setup.sh prometheus)');
      return;
    }
    const o = await observed();
    const c = client(o.port);
    const r = await c.acquire('k');
    if (r.status === 'acquired') await c.release('k', r.token);
    const text = await o.scrape();
    const { code, output } = await run(promtool, ['check', 'metrics'], text);
    // Exit 0 and not a line of output: no lint problem (exit 3) and nothing unparsable (exit 1),
    // prom-client's default metrics included.
    expect({ code, output: output.trim() }).toEqual({ code: 0, output: '' });
    expect(text).toMatch(/^# TYPE nodejs_active_handles gauge$/m);
    expect(text).toMatch(/^# TYPE ticketing_requests_total counter$/m);
  });
});

function which(name: string): Promise<string | undefined> {
  return new Promise((resolve) =>
    execFile('sh', ['-c', `command -v ${name}`], (error, stdout) => resolve(error ? undefined : stdout.trim())),
  );
}

function run(file: string, args: string[], input: string): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    const child = execFile(file, args, { timeout: 10_000 }, (error, stdout, stderr) => {
      if (error !== null && typeof error.code !== 'number') reject(new Error(error.message));
      else resolve({ code: typeof error?.code === 'number' ? error.code : 0, output: `${stdout}${stderr}` });
    });
    child.stdin!.end(input);
  });
}
