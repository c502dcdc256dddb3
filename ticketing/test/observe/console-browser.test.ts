/**
 * The console in a real browser (Debian's chromium through playwright-core) against a real server
 * and real TicketClients: sign-in, rows that follow the table within 1 s, the countdown, waiters,
 * the filter, a server restart the page rides out, keyboard and axe-core checks, and that the page
 * asks nothing of another origin and logs no error. Skips with one line without chromium.
 */
import { readFileSync } from 'node:fs';
import type { Browser } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { TicketClient } from '../../src/client.js';
import { browserMissing, launchBrowser, axeCheck, watchedPage, type WatchedPage } from '../browser.js';
import { LineSocket, sleep } from '../helpers.js';
import { makePki } from '../tls-helpers.js';
import { startObserved, type Observed } from './support.js';

if (browserMissing !== undefined) console.warn(browserMissing);

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

async function observed(...args: Parameters<typeof startObserved>): Promise<Observed> {
  const o = await startObserved(...args);
  cleanups.push(() => o.close());
  return o;
}

function client(port: number, secret?: string): TicketClient {
  const c = new TicketClient({ port, secret });
  cleanups.push(() => c.destroy());
  return c;
}

async function acquired(c: TicketClient, key: string, owner: string): Promise<bigint> {
  const r = await c.acquire(key, { owner });
  if (r.status !== 'acquired') throw new Error(`${key}: ${r.status}`);
  return r.token;
}

describe.skipIf(browserMissing !== undefined)('the console in a browser', () => {
  let browser: Browser;
  beforeAll(async () => {
    browser = await launchBrowser();
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
  });

  async function open(origin: string, options?: Parameters<typeof watchedPage>[2]): Promise<WatchedPage> {
    const watched = await watchedPage(browser, origin, options);
    cleanups.push(() => watched.close());
    await watched.page.goto(`${origin}/`);
    return watched;
  }

  async function signIn({ page }: WatchedPage, secret: string): Promise<void> {
    await page.fill('#secret', secret);
    await page.press('#secret', 'Enter');
  }

  /** The table row of `key`. */
  const rowOf = ({ page }: WatchedPage, key: string) =>
    page.locator('#rows tr', { has: page.locator('th', { hasText: new RegExp(`^${key}$`) }) });

  test('sign-in; a key shows with its owner, counts down, shows its waiter, goes on release; the filter', async () => {
    const o = await observed({ secret: 's3cret', leaseMs: 20_000 });
    const origin = `http://127.0.0.1:${o.httpPort}`;
    const watched = await open(origin);
    const { page } = watched;

    await page.locator('#signin').waitFor({ state: 'visible' });
    expect(await page.isVisible('#console')).toBe(false);
    await signIn(watched, 'not-it');
    await page.locator('#signin-error', { hasText: 'That is not the secret.' }).waitFor();
    expect(await page.isVisible('#console')).toBe(false);
    await signIn(watched, 's3cret');
    await page.locator('#connection', { hasText: 'Live' }).waitFor();
    expect(await page.inputValue('#secret')).toBe(''); // not left in the form
    expect(watched.requests.filter((url) => url.includes('s3cret'))).toEqual([]); // never in a URL

    const holder = client(o.port, 's3cret');
    const token = await acquired(holder, 'orders/1', 'worker-a');
    const row = rowOf(watched, 'orders/1');
    await row.filter({ hasText: 'worker-a' }).waitFor({ timeout: 1_000 });
    expect(await row.locator('td.kind').textContent()).toBe('lock');
    expect(await row.textContent()).toContain(`#${token}`);
    const publisher = await LineSocket.connect(o.port);
    publisher.write(`H s3cret\nP orders/1 ${token} 10.0.0.5:8080\n`);
    expect(await publisher.readLine()).toBe(`P ${token} orders/1`);
    publisher.destroy();
    await row.locator('.value', { hasText: '10.0.0.5:8080' }).waitFor({ timeout: 1_000 });

    const left = async (): Promise<number> => Number(await row.locator('progress').first().getAttribute('value'));
    const before = await left();
    await sleep(600);
    const after = await left();
    expect(before).toBeLessThanOrEqual(20_000);
    expect(after).toBeLessThan(before);
    expect(after).toBeGreaterThan(before - 5_000);

    const waiter = client(o.port, 's3cret');
    const waiting = waiter.acquire('orders/1', { owner: 'worker-b', waitMs: 10_000 });
    await row.locator('td.waiters', { hasText: '1 (worker-b)' }).waitFor({ timeout: 1_000 });
    await holder.release('orders/1', token);
    const handed = await waiting;
    if (handed.status !== 'acquired') throw new Error(handed.status);
    await row.filter({ hasText: 'worker-b' }).locator('td.waiters', { hasText: /^0$/ }).waitFor({ timeout: 1_000 });
    await waiter.release('orders/1', handed.token);
    await row.waitFor({ state: 'detached', timeout: 1_000 });
    await page.locator('#count', { hasText: 'No held keys.' }).waitFor({ timeout: 1_000 });

    for (const key of ['users/1', 'users/2', 'orders/2']) await acquired(holder, key, 'worker-c');
    const rows = page.locator('#rows tr');
    await expect.poll(() => rows.count(), { timeout: 1_000, interval: 20 }).toBe(3);
    await page.fill('#filter', 'users/');
    await expect.poll(() => rows.count(), { timeout: 1_000, interval: 20 }).toBe(2);
    expect(await rows.locator('th').allTextContents()).toEqual(['users/1', 'users/2']);
    expect(await page.textContent('#count')).toBe('Showing 2 of 2 held keys starting with “users/”.');
    await page.fill('#filter', 'nothing/');
    await page.locator('#count', { hasText: 'No held keys starting with “nothing/”.' }).waitFor();
    await page.fill('#filter', '');
    await expect.poll(() => rows.count(), { timeout: 2_000, interval: 20 }).toBe(3);

    expect(watched.foreign).toEqual([]);
    expect(watched.errors).toEqual([]);
  });

  test('keyboard: the filter and the table are reached with Tab and labelled; axe finds nothing serious', async () => {
    const o = await observed({ leaseMs: 60_000 });
    const holder = client(o.port);
    await acquired(holder, 'jobs/nightly', 'cron-1');
    const waiting = client(o.port).acquire('jobs/nightly', { owner: 'cron-2', waitMs: 30_000 });
    waiting.catch(() => {}); // ends indeterminate when the test destroys its client
    const origin = `http://127.0.0.1:${o.httpPort}`;
    const watched = await open(origin);
    const { page } = watched;
    await rowOf(watched, 'jobs/nightly').locator('td.waiters', { hasText: 'cron-2' }).waitFor();

    const focused = async (): Promise<string> => {
      const active = page.locator(':focus');
      return (await active.count()) === 0
        ? ''
        : `#${await active.getAttribute('id')}.${await active.getAttribute('class')}`;
    };
    const reached: string[] = [];
    for (let i = 0; i < 6 && !reached.includes('#null.scroll'); i++) {
      await page.keyboard.press('Tab');
      reached.push(await focused());
    }
    expect(reached).toContain('#filter.null');
    expect(reached.indexOf('#null.scroll')).toBe(reached.indexOf('#filter.null') + 1);
    expect(await page.getAttribute('.scroll', 'aria-labelledby')).toBe('locks-title');
    expect(await page.locator('label[for="filter"]').textContent()).toBe('Key prefix');
    await page.keyboard.press('Shift+Tab');
    await page.keyboard.type('jobs/');
    await page.locator('#count', { hasText: 'starting with “jobs/”' }).waitFor();

    const axe = await axeCheck(page);
    expect(axe.serious).toEqual([]);
    expect(axe.passed).toBeGreaterThan(10); // it ran
    expect(watched.foreign).toEqual([]);
    expect(watched.errors).toEqual([]);
  });

  test('over HTTPS when the server has TLS', async () => {
    const pki = await makePki();
    cleanups.push(() => pki.remove());
    const tls = { cert: readFileSync(pki.server.cert), key: readFileSync(pki.server.key) };
    const o = await observed({}, { tls });
    await acquired(client(o.port), 'secure/1', 'tls-worker');
    // The test CA is not the browser's: its certificate errors are ignored for this context only.
    const watched = await open(`https://localhost:${o.httpPort}`, { ignoreHTTPSErrors: true });
    await rowOf(watched, 'secure/1').filter({ hasText: 'tls-worker' }).waitFor();
    expect(watched.requests.every((url) => url.startsWith(`https://localhost:${o.httpPort}/`))).toBe(true);
    expect(watched.errors).toEqual([]);
  });

  test('a server restart: the page reconnects by itself and shows the new table, nothing left from before', async () => {
    const first = await startObserved({ secret: 's3cret' });
    let firstOpen = true;
    cleanups.push(() => (firstOpen ? first.close() : undefined));
    const origin = `http://127.0.0.1:${first.httpPort}`;
    const watched = await open(origin);
    const { page } = watched;
    await signIn(watched, 's3cret');
    await page.locator('#connection', { hasText: 'Live' }).waitFor(); // the stream is open: changes come within 1 s
    await acquired(client(first.port, 's3cret'), 'before/1', 'old-worker');
    await rowOf(watched, 'before/1').waitFor({ timeout: 1_000 });

    await first.close();
    firstOpen = false;
    await page.locator('#connection', { hasText: 'Reconnecting' }).waitFor({ timeout: 6_000 });
    const second = await observed({ secret: 's3cret' }, { port: first.httpPort });
    await acquired(client(second.port, 's3cret'), 'after/1', 'new-worker');
    await rowOf(watched, 'after/1').waitFor({ timeout: 5_000 });
    await page.locator('#connection', { hasText: 'Live' }).waitFor();
    expect(await page.locator('#rows th').allTextContents()).toEqual(['after/1']);
    expect(await page.isVisible('#signin')).toBe(false); // the secret in memory was used again

    expect(watched.foreign).toEqual([]);
    // While the server was down, the browser reports the refused connections; nothing else.
    expect(watched.errors.filter((e) => !/ERR_CONNECTION_REFUSED/.test(e))).toEqual([]);
  });
});
