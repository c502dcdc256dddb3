/**
 * The console in cluster mode, in a real browser: 3 nodes on a real etcd, each on its own loopback
 * address with `--http` on one shared port, as on separate hosts. A follower's page names the
 * leader and links to the leader's console; when the leader dies and that follower takes over,
 * its page shows the new role and the table without a reload.
 */
import type { Browser } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { TicketClient } from '../../src/client.js';
import { browserMissing, launchBrowser, watchedPage } from '../browser.js';
import {
  findEtcd,
  freePorts,
  startEtcdCluster,
  startTicketingNodes,
  type EtcdCluster,
  type TicketingNodes,
} from './harness.mjs';
import { sleep } from './support.js';

const etcd = await findEtcd();
const skip = etcd.reason ?? browserMissing;
if (skip !== undefined) console.warn(`cluster console tests skipped: ${skip}`);

describe.skipIf(skip !== undefined)('the console in cluster mode', () => {
  let cluster: EtcdCluster;
  let browser: Browser;
  const cleanups: Array<() => Promise<void> | void> = [];

  beforeAll(async () => {
    cluster = await startEtcdCluster({ members: 1 });
    browser = await launchBrowser();
  }, 60_000);
  afterEach(async () => {
    while (cleanups.length > 0) await cleanups.pop()!();
  }, 30_000);
  afterAll(async () => {
    await browser?.close();
    await cluster?.stop();
  }, 30_000);

  /** Each node's `GET /v1/node` (undefined while it does not answer). */
  async function nodeViews(hosts: string[], httpPort: number): Promise<Array<Record<string, unknown> | undefined>> {
    return Promise.all(
      hosts.map(async (host) => {
        try {
          const answer = await fetch(`http://${host}:${httpPort}/v1/node`, { signal: AbortSignal.timeout(1_000) });
          return answer.ok ? ((await answer.json()) as Record<string, unknown>) : undefined;
        } catch {
          return undefined;
        }
      }),
    );
  }

  async function leaderIndex(hosts: string[], httpPort: number, not?: number): Promise<number> {
    const deadline = Date.now() + 15_000;
    for (;;) {
      const views = await nodeViews(hosts, httpPort);
      const leader = views.findIndex((view, i) => i !== not && view?.role === 'leader' && view.ready === true);
      if (leader >= 0) return leader;
      if (Date.now() > deadline) throw new Error(`no leader within 15 s: ${JSON.stringify(views)}`);
      await sleep(100);
    }
  }

  it("a follower's page names the leader and links to its console; after a failover it follows", async () => {
    const hosts = ['127.0.0.2', '127.0.0.3', '127.0.0.4'];
    const [httpPort] = await freePorts(1);
    const group: TicketingNodes = await startTicketingNodes({
      etcdEndpoints: cluster.endpoints,
      hosts,
      nodeArgs: hosts.map((host) => ['--http', `${host}:${httpPort}`]),
      lease: '30s',
    });
    cleanups.push(() => group.stop(2_000));
    const leader = await leaderIndex(hosts, httpPort!);
    const follower = (leader + 1) % hosts.length;
    const origin = `http://${hosts[follower]}:${httpPort}`;
    const watched = await watchedPage(browser, origin);
    cleanups.push(() => watched.close());
    const { page } = watched;
    await page.goto(`${origin}/`);

    const leaderAddress = group.nodes[leader]!.address;
    const link = page.locator('#node-leader a');
    await link.waitFor();
    expect(await link.textContent()).toBe(leaderAddress);
    expect(await link.getAttribute('href')).toBe(`http://${hosts[leader]}:${httpPort}/`);
    expect(await page.textContent('#node-role')).toBe('follower');
    expect(await page.textContent('#node-etcd')).toBe('reachable');
    const note = page.locator('#follower-note');
    expect(await note.textContent()).toContain(`the leader, ${leaderAddress}`);
    expect(await note.locator('a').getAttribute('href')).toBe(`http://${hosts[leader]}:${httpPort}/`);

    // The leader and the other follower die: this node takes over, and its page follows without a reload.
    const other = 3 - leader - follower;
    await Promise.all([group.nodes[leader]!.kill('SIGKILL'), group.nodes[other]!.kill('SIGKILL')]);
    expect(await leaderIndex(hosts, httpPort!, leader)).toBe(follower);
    await page.locator('#node-role', { hasText: /^leader$/ }).waitFor({ timeout: 10_000 });
    expect(await page.textContent('#node-leader')).toBe(`${group.nodes[follower]!.address} (this node)`);
    expect(await page.isVisible('#follower-note')).toBe(false);
    const client = new TicketClient({ addresses: [group.nodes[follower]!.address] });
    cleanups.push(() => client.destroy());
    const grant = await client.acquire('after-failover', { owner: 'survivor' });
    expect(grant.status).toBe('acquired');
    await page.locator('#rows tr', { hasText: 'survivor' }).waitFor({ timeout: 1_000 });
    expect(watched.foreign).toEqual([]);
    expect(watched.errors).toEqual([]);
  }, 90_000);
});
