/**
 * Leader election end to end, the client against the real server over real sockets: campaign,
 * publish and resign as an observer sees them, a hand-off, the stream's order, a slow consumer,
 * U on abort, a server restart under an observer (revs keep rising), and the `ticketing leader`
 * and `ticketing run --publish` commands as real processes. Cluster failover under observers:
 * test/cluster.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, test } from 'vitest';
import { TicketClient, type TicketClientOptions } from '../src/client.js';
import type { ObservedView } from '../src/client/observations.js';
import { TicketServer, type TicketServerOptions } from '../src/server/server.js';
import { CLI, nextValue, runCli, sleep, startServer, until } from './helpers.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

async function server(options: TicketServerOptions = {}): Promise<{ server: TicketServer; port: number }> {
  const started = await startServer(options);
  cleanups.push(started.close);
  return started;
}

function client(port: number, options: Partial<TicketClientOptions> = {}): TicketClient {
  const c = new TicketClient({ port, backoff: { initialMs: 5, maxMs: 50 }, ...options });
  cleanups.push(() => c.destroy());
  return c;
}

describe('campaign and observe', () => {
  test('vacant, then the leader with its value, a new value, and vacant again after resign: revs rise', async () => {
    const { port } = await server();
    const watcher = client(port);
    const views = watcher.observe('svc');
    const vacant = await nextValue(views);
    expect(vacant).toMatchObject({ holder: null, holders: 0 });
    const leader = client(port);
    const leadership = await leader.campaign('svc', { value: '10.0.0.5:8080' });
    const seen: ObservedView[] = [];
    // The grant and the publish are two changes; the observer may see both or, if it lags, the last.
    do seen.push(await nextValue(views));
    while (seen.at(-1)!.holder?.value !== '10.0.0.5:8080');
    const held = seen.at(-1)!;
    expect(held.holder).toEqual({ owner: leadership.owner, token: leadership.token, value: '10.0.0.5:8080' });
    expect(held.holders).toBe(1);
    await leadership.publish('10.0.0.6:8080 zone b');
    const moved = await nextValue(views);
    expect(moved.holder?.value).toBe('10.0.0.6:8080 zone b');
    await leadership.resign();
    expect(leadership.signal.aborted).toBe(true);
    const after = await nextValue(views);
    expect(after).toMatchObject({ holder: null, holders: 0 });
    const revs = [vacant, ...seen, moved, after].map((v) => v.rev);
    for (let i = 1; i < revs.length; i++) expect(revs[i]! > revs[i - 1]!).toBe(true);
  });

  test('a hand-off: the waiting candidate leads next, and the observer never sees a vacancy between', async () => {
    const { port } = await server();
    const [a, b, watcher] = [client(port), client(port), client(port)];
    const first = await a.campaign('svc', { value: 'a' });
    const views = watcher.observe('svc');
    expect((await nextValue(views)).holder?.value).toBe('a');
    const second = b.campaign('svc', { value: 'b', waitMs: 10_000 });
    await sleep(50); // b waits in the queue
    await first.resign();
    const next = await second;
    const seen: ObservedView[] = [];
    do seen.push(await nextValue(views));
    while (seen.at(-1)!.holder?.value !== 'b');
    expect(seen.every((v) => v.holders === 1)).toBe(true);
    expect(seen.at(-1)!.holder).toEqual({ owner: next.owner, token: next.token, value: 'b' });
    expect(next.token > first.token).toBe(true);
    await next.resign();
  });

  test('a leader that dies: the observer sees the key vacant once its lease ran out', async () => {
    const { port } = await server({ leaseMs: 300 });
    const watcher = client(port);
    const views = watcher.observe('svc');
    await nextValue(views);
    const dying = client(port);
    await dying.campaign('svc', { value: 'here' });
    let held: ObservedView;
    do held = await nextValue(views);
    while (held.holder?.value !== 'here');
    const diedAt = Date.now();
    dying.destroy(); // no more keeps, no release
    const vacant = await nextValue(views);
    expect(vacant).toMatchObject({ holder: null, holders: 0 });
    expect(vacant.rev).toBe(held.rev + 1n);
    expect(Date.now() - diedAt).toBeGreaterThanOrEqual(100); // at the lease's end, not at the death
  });

  test('a publish by a stale token is refused (G) and changes nothing', async () => {
    const { port } = await server();
    const c = client(port);
    const leadership = await c.campaign('svc', { value: 'mine' });
    await leadership.resign();
    const other = await c.campaign('svc', { value: 'theirs' });
    await expect(c.publish('svc', leadership.token, 'stale')).rejects.toMatchObject({
      code: 'ETICKETLOST',
      reason: 'gone',
    });
    const views = c.observe('svc');
    expect((await nextValue(views)).holder).toMatchObject({ token: other.token, value: 'theirs' });
    await other.resign();
  });

  test('an observer that does not read gets the latest view, not the ones between', async () => {
    const { port } = await server();
    const watcher = client(port);
    const views = watcher.observe('svc');
    await nextValue(views);
    const leadership = await client(port).campaign('svc');
    let granted: ObservedView;
    do granted = await nextValue(views);
    while (granted.holder === null);
    for (let i = 1; i <= 50; i++) await leadership.publish(`value-${i}`); // not read meanwhile
    await sleep(50);
    const latest = await nextValue(views);
    expect(latest.holder?.value).toBe('value-50');
    expect(latest.rev).toBe(granted.rev + 50n); // the jump says how many it did not see
    const more = views.next();
    expect(await Promise.race([more.then(() => 'more'), sleep(100).then(() => 'nothing queued')])).toBe(
      'nothing queued',
    );
    await leadership.resign();
    expect((await more).value).toMatchObject({ holders: 0 });
  });

  test('aborting the observation sends U: the server counts one observation less', async () => {
    const { server: s, port } = await server();
    const watcher = client(port);
    const controller = new AbortController();
    const views = watcher.observe('svc', { signal: controller.signal });
    const shared = watcher.observe('svc');
    await nextValue(views);
    await nextValue(shared);
    expect(s.stats().observations).toBe(1); // two observers, one observation
    controller.abort();
    expect(await views.next()).toEqual({ value: undefined, done: true });
    await sleep(50);
    expect(s.stats().observations).toBe(1);
    await shared.return();
    await until(() => s.stats().observations === 0, 'the U to arrive', 5_000);
  });

  test('a server restart under an observer: it observes again, and the revs it yields keep rising', async () => {
    const first = new TicketServer({ port: 0 });
    const { port } = await first.listen();
    const servers = [first];
    cleanups.push(async () => {
      for (const s of servers) await s.close();
    });
    const views = client(port).observe('svc');
    await client(port).campaign('svc', { value: 'before' }); // its lease ends with the server
    let before: ObservedView;
    do before = await nextValue(views);
    while (before.holder?.value !== 'before');
    await first.close();
    const second = new TicketServer({ port });
    servers.push(second);
    await second.listen();
    const next = await client(port).campaign('svc', { value: 'after' });
    let after: ObservedView;
    do after = await nextValue(views, 10_000);
    while (after.holder?.value !== 'after');
    expect(after.rev > before.rev).toBe(true);
    expect(after.holder?.token).toBe(next.token);
    await next.resign();
  });
});

describe('ticketing leader', () => {
  test('exit 3 and "none" for a vacant key; exit 0 with owner, token and value for a leader', async () => {
    const { port } = await server();
    const vacant = await runCli(['leader', '--addresses', `127.0.0.1:${port}`, '--key', 'svc']);
    expect(vacant.code, vacant.stderr).toBe(3);
    expect(vacant.stdout).toMatch(/^rev=\d+ none\n$/);
    const leadership = await client(port).campaign('svc', { value: '10.0.0.5:8080 zone a' });
    const led = await runCli(['leader', '--addresses', `127.0.0.1:${port}`, '--key', 'svc']);
    expect(led.code, led.stderr).toBe(0);
    expect(led.stdout).toBe(
      `rev=${/rev=(\d+)/.exec(led.stdout)![1]} owner=${leadership.owner} token=${leadership.token} value=10.0.0.5:8080 zone a\n`,
    );
    const json = await runCli(['leader', '--addresses', `127.0.0.1:${port}`, '--key', 'svc', '--json']);
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toMatchObject({
      key: 'svc',
      holder: { owner: leadership.owner, token: String(leadership.token), value: '10.0.0.5:8080 zone a' },
      holders: 1,
    });
    await leadership.resign();
  });

  test.each(['SIGINT', 'SIGTERM'] as const)(
    '--watch --json: a line per change until %s, then exit 0',
    async (signal) => {
      const { port } = await server();
      const child = spawn(process.execPath, [
        CLI,
        'leader',
        '--addresses',
        `127.0.0.1:${port}`,
        '--key',
        'svc',
        '--watch',
        '--json',
      ]);
      cleanups.push(() => void child.kill('SIGKILL'));
      let out = '';
      child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
      const lines = (): Array<{ rev: string; holder: { value: string | null } | null; holders: number }> =>
        out
          .split('\n')
          .filter((l) => l !== '')
          .map((l) => JSON.parse(l) as { rev: string; holder: { value: string | null } | null; holders: number });
      await until(() => lines().length === 1, 'the first view', 5_000);
      expect(lines()[0]).toMatchObject({ holder: null, holders: 0 });
      const leadership = await client(port).campaign('svc', { value: 'here' });
      await until(() => lines().at(-1)?.holder?.value === 'here', 'the leader with its value', 5_000);
      await leadership.resign();
      await until(() => lines().at(-1)?.holders === 0, 'the vacancy', 5_000);
      const revs = lines().map((l) => BigInt(l.rev));
      for (let i = 1; i < revs.length; i++) expect(revs[i]! > revs[i - 1]!).toBe(true);
      child.kill(signal);
      const [code] = (await once(child, 'exit')) as [number | null];
      expect(code).toBe(0);
    },
  );

  test('a key held shared has no leader: holders=N, exit 3; the observer sees the count', async () => {
    const { port } = await server();
    const c = client(port);
    const [a, b] = await Promise.all([c.acquire('svc', { shared: true }), c.acquire('svc', { shared: true })]);
    expect([a.status, b.status]).toEqual(['acquired', 'acquired']);
    expect(await nextValue(c.observe('svc'))).toMatchObject({ holder: null, holders: 2 });
    const shown = await runCli(['leader', '--addresses', `127.0.0.1:${port}`, '--key', 'svc']);
    expect(shown.code).toBe(3);
    expect(shown.stdout).toMatch(/^rev=\d+ none holders=2\n$/);
  });

  test('the secret from --secret-file: the right one observes, a wrong one exits 1 saying auth_failed', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ticketing-leader-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(join(dir, 'secret'), 's3cret\n');
    writeFileSync(join(dir, 'wrong'), 'guess\n');
    const { port } = await server({ secret: 's3cret' });
    const args = ['leader', '--addresses', `127.0.0.1:${port}`, '--key', 'svc', '--secret-file'];
    const right = await runCli([...args, join(dir, 'secret')]);
    expect(right.code, right.stderr).toBe(3);
    const wrong = await runCli([...args, join(dir, 'wrong')]);
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toContain('auth_failed');
  });

  test('no server: exit 1 after --timeout, saying so; bad flags: exit 64', async () => {
    const { port } = await server();
    const address = `127.0.0.1:${port}`;
    const free = `127.0.0.1:1`;
    const down = await runCli(['leader', '--addresses', free, '--key', 'svc', '--timeout', '300ms']);
    expect(down.code).toBe(1);
    expect(down.stderr).toContain('no answer from 127.0.0.1:1 within 300 ms');
    for (const args of [
      ['--key', 'svc'],
      ['--addresses', address],
      ['--addresses', address, '--key', 'a b'],
      ['--addresses', 'nope', '--key', 'svc'],
      ['--addresses', address, '--key', 'svc', '--tls-cert', 'c.pem'],
      ['--addresses', address, '--key', 'svc', '--timeout', 'soon'],
    ]) {
      const bad = await runCli(['leader', ...args]);
      expect(bad.code, args.join(' ')).toBe(64);
      expect(bad.stderr).toMatch(/^ticketing: /);
    }
  });
});

describe('ticketing run --publish', () => {
  test('the value is published before the command starts: the command sees itself lead with it', async () => {
    const { port } = await server();
    const address = `127.0.0.1:${port}`;
    const run = await runCli(
      [
        'run',
        '--addresses',
        address,
        '--key',
        'svc',
        '--publish',
        '10.0.0.5:8080',
        '--',
        process.execPath,
        CLI,
        'leader',
        '--addresses',
        address,
        '--key',
        'svc',
      ],
      20_000,
    );
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/^rev=\d+ owner=\S+ token=\d+ value=10\.0\.0\.5:8080\n$/);
    // Released when the command ended.
    const after = await runCli(['leader', '--addresses', address, '--key', 'svc']);
    expect(after.code).toBe(3);
  });

  test('a value the flag refuses is a usage error (exit 64), nothing held', async () => {
    const { server: s, port } = await server();
    for (const value of ['', 'x'.repeat(513), 'é']) {
      const run = await runCli([
        'run',
        '--addresses',
        `127.0.0.1:${port}`,
        '--key',
        'svc',
        '--publish',
        value,
        '--',
        'true',
      ]);
      expect(run.code).toBe(64);
      expect(run.stderr).toContain('--publish');
    }
    expect(s.stats().keys).toBe(0);
  });
});
