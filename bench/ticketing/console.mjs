/**
 * The console's weight and its time to first render with many keys, in Debian's chromium
 * (playwright-core): `node bench/ticketing/console.mjs [--keys 10000] [--rounds 5] [--screenshot
 * docs/console.png]` after `npm run build`.
 *
 * One in-process server (ticketing/dist) with `--keys` keys held by a real TicketClient, some with
 * waiters, and its HTTP endpoint. Each round opens the console in a fresh browser context and
 * reads: the bytes of every file of the page as served (uncompressed: the endpoint does not
 * compress; gzip of the same bytes shown beside), the bytes of the stream's first snapshot, and
 * the page's `console:first-render` mark (ms from navigation start to the first table drawn from a
 * snapshot). Median and range over the rounds. With `--screenshot`, a small table (a few dozen
 * keys, waiters, some traffic for the chart) is photographed to that file.
 */
import { existsSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { gzipSync } from 'node:zlib';
import { chromium } from 'playwright-core';
import { TicketClient, TicketServer } from '../../ticketing/dist/index.js';
import { HttpEndpoint } from '../../ticketing/dist/observe/http.js';
import { TicketMetrics } from '../../ticketing/dist/observe/metrics.js';

const CHROMIUM = '/usr/bin/chromium';
const { values: flags } = parseArgs({
  options: {
    keys: { type: 'string', default: '10000' },
    rounds: { type: 'string', default: '5' },
    screenshot: { type: 'string' },
  },
});

async function startServer() {
  const server = new TicketServer({ port: 0, leaseMs: 120_000, maxWaiters: 100_000 });
  const metrics = new TicketMetrics({ server });
  const endpoint = new HttpEndpoint({ server, metrics });
  const { port } = await server.listen();
  const { port: httpPort } = await endpoint.listen();
  const clients = [];
  const client = () => {
    const made = new TicketClient({ port });
    clients.push(made);
    return made;
  };
  return {
    server,
    port,
    origin: `http://127.0.0.1:${httpPort}`,
    client,
    async close() {
      for (const made of clients) made.destroy();
      await server.close();
      await endpoint.close();
      metrics.close();
    },
  };
}

/** `count` keys `<prefix><n>` held by a few owners (pipelined, in batches), and a waiter on
 * every 50th. */
async function fill(s, count, prefix) {
  const holder = s.client();
  for (let start = 0; start < count; start += 500) {
    const batch = [];
    for (let n = start; n < Math.min(count, start + 500); n++)
      batch.push(holder.acquire(`${prefix}${n}`, { owner: `worker-${n % 3}` }));
    await Promise.all(batch);
  }
  const waiter = s.client();
  for (let n = 0; n < count; n += 50)
    waiter.acquire(`${prefix}${n}`, { owner: 'batch-runner', waitMs: 110_000 }).catch(() => {});
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

async function measure(browser, keys, rounds) {
  const s = await startServer();
  try {
    await fill(s, keys, 'job/');
    const samples = [];
    for (let round = 0; round < rounds; round++) {
      const context = await browser.newContext({ viewport: { width: 1200, height: 800 } });
      const page = await context.newPage();
      const bodies = new Map();
      page.on('response', async (response) => {
        const url = response.url();
        if (url.endsWith('/v1/locks/events')) return;
        bodies.set(url, await response.body().catch(() => Buffer.alloc(0)));
      });
      const streamSize = fetch(`${s.origin}/v1/locks/events`).then(async (response) => {
        const reader = response.body.getReader();
        let text = '';
        const decoder = new TextDecoder();
        while (!text.includes('\n\n')) text += decoder.decode((await reader.read()).value, { stream: true });
        await reader.cancel();
        return Buffer.byteLength(text.slice(0, text.indexOf('\n\n') + 2));
      });
      await page.goto(`${s.origin}/`);
      await page.waitForFunction(() => performance.getEntriesByName('console:first-render').length > 0, undefined, {
        timeout: 60_000,
      });
      const firstRenderMs = await page.evaluate(
        () => performance.getEntriesByName('console:first-render')[0].startTime,
      );
      const count = await page.textContent('#count');
      const snapshotBytes = await streamSize;
      const files = [...bodies.values()];
      samples.push({
        firstRenderMs,
        pageBytes: files.reduce((sum, body) => sum + body.length, 0),
        pageGzipBytes: files.reduce((sum, body) => sum + gzipSync(body).length, 0),
        files: files.length,
        snapshotBytes,
        count,
      });
      await context.close();
    }
    return samples;
  } finally {
    await s.close();
  }
}

async function screenshot(browser, file) {
  const s = await startServer();
  try {
    const names = [
      'orders/1042',
      'orders/1043',
      'orders/1077',
      'billing/invoice-run',
      'billing/ledger',
      'reports/nightly',
    ];
    const owners = ['api-7f9c', 'api-2b10', 'worker-3', 'cron@batch-1', 'ledger-writer', 'reports-0'];
    const holder = s.client();
    for (let i = 0; i < names.length; i++) await holder.acquire(names[i], { owner: owners[i] });
    for (let n = 0; n < 30; n++) await holder.acquire(`jobs/shard-${n}`, { owner: `shard-worker-${n % 5}` });
    const waiter = (key, owner) =>
      s
        .client()
        .acquire(key, { owner, waitMs: 100_000 })
        .catch(() => {});
    waiter('orders/1042', 'api-c3d1');
    waiter('orders/1042', 'api-91aa');
    waiter('billing/invoice-run', 'cron@batch-2');
    // Some traffic for the requests-per-second chart: short bursts of acquire/release.
    const busy = s.client();
    for (let second = 0; second < 12; second++) {
      const cycles = 40 + Math.round(30 * Math.sin(second / 2));
      for (let i = 0; i < cycles; i++) {
        const grant = await busy.acquire(`hot/${i % 4}`);
        if (grant.status === 'acquired') await busy.release(`hot/${i % 4}`, grant.token);
      }
      await new Promise((resolve) => setTimeout(resolve, 1_000));
    }
    const context = await browser.newContext({ viewport: { width: 1100, height: 760 } });
    const page = await context.newPage();
    await page.goto(`${s.origin}/`);
    await page.locator('#rows tr').first().waitFor();
    await page.waitForTimeout(1_500);
    await page.screenshot({ path: file });
    await context.close();
  } finally {
    await s.close();
  }
}

if (!existsSync(CHROMIUM)) {
  console.error(`${CHROMIUM} is missing: sh scripts/setup.sh chromium`);
  process.exit(1);
}
const browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: process.getuid?.() === 0 ? ['--no-sandbox'] : [],
});
try {
  const keys = Number(flags.keys);
  const samples = await measure(browser, keys, Number(flags.rounds));
  const range = (pick) => {
    const values = samples.map(pick);
    return `${median(values)} (${Math.min(...values)}–${Math.max(...values)})`;
  };
  const ms = (v) => Math.round(v);
  console.log(
    `| keys held | page files | page bytes (as served) | gzipped | first snapshot bytes | first render, ms |`,
  );
  console.log(`| --- | --- | --- | --- | --- | --- |`);
  console.log(
    `| ${keys} | ${samples[0].files} | ${samples[0].pageBytes} | ${samples[0].pageGzipBytes} | ${samples[0].snapshotBytes} | ${range((x) => ms(x.firstRenderMs))} |`,
  );
  console.log(`rounds: ${samples.length}; the page said: ${samples[0].count}`);
  if (flags.screenshot !== undefined) {
    await screenshot(browser, flags.screenshot);
    console.log(`screenshot: ${flags.screenshot}`);
  }
} finally {
  await browser.close();
}
