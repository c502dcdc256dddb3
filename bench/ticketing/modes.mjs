#!/usr/bin/env node
/**
 * Modes against the exclusive mutex, in one run (docs/ticketing-bench.md "Modes"): one
 * `ticketing serve`, TicketClient loops (acquire → release, waitMs 10 s) in this process.
 * Workloads, 64 contenders on one key: `mutex` (x), `semaphore 8` (permits 8), `readers + rare
 * writer` (shared, one cycle in 100 exclusive); and 64 loops on distinct keys in `x` and in `s`
 * (a shared cycle's own cost against an exclusive one's). Rounds interleave the workloads; each
 * cell is the median over rounds, the ratios the median of the rounds' ratios.
 *
 *   node bench/ticketing/modes.mjs [--rounds 5] [--duration 2000]   (npm run build first)
 *
 * Results: markdown on stdout, JSON in bench/ticketing/modes-results.json.
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { TicketClient } from '../../ticketing/dist/index.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const arg = (name, fallback) => {
  const i = process.argv.indexOf(name);
  return i < 0 ? fallback : Number(process.argv[i + 1]);
};
const ROUNDS = arg('--rounds', 5);
const DURATION_MS = arg('--duration', 2_000);
const LOOPS = 64;
const CLIENTS = 4;

const WORKLOADS = [
  { name: 'mutex (x) 64 on 1 key', key: () => 'hot-x', mode: () => ({}) },
  { name: 'semaphore 8, 64 on 1 key', key: () => 'hot-sem', mode: () => ({ permits: 8 }) },
  {
    name: 'readers + rare writer, 64 on 1 key',
    key: () => 'hot-rw',
    mode: (n) => (n % 100 === 99 ? {} : { shared: true }),
  },
  { name: 'distinct keys, x', key: (loop) => `x-${loop}`, mode: () => ({}) },
  { name: 'distinct keys, s', key: (loop) => `s-${loop}`, mode: () => ({ shared: true }) },
];

async function startServer() {
  const cli = join(root, 'ticketing', 'dist', 'cli.js');
  const child = spawn(process.execPath, [cli, 'serve', '--port', '0', '--lease', '30s'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let text = '';
  for await (const chunk of child.stdout) {
    text += chunk;
    const m = /^listening (\S+):(\d+)$/m.exec(text);
    if (m) return { child, port: Number(m[2]) };
  }
  throw new Error('the server exited before listening');
}

async function runWorkload(clients, workload) {
  const latencies = [];
  let cycles = 0;
  const end = performance.now() + DURATION_MS;
  await Promise.all(
    Array.from({ length: LOOPS }, async (_, loop) => {
      const client = clients[loop % clients.length];
      for (let n = loop; performance.now() < end; n++) {
        const key = workload.key(loop);
        const started = performance.now();
        const r = await client.acquire(key, { waitMs: 10_000, ...workload.mode(n) });
        if (r.status !== 'acquired') throw new Error(`${workload.name}: ${r.status}`);
        await client.release(key, r.token);
        latencies.push(performance.now() - started);
        cycles++;
      }
    }),
  );
  latencies.sort((a, b) => a - b);
  return { cyclesPerS: (cycles / DURATION_MS) * 1000, p99Ms: latencies[Math.floor(latencies.length * 0.99)] };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const server = await startServer();
const clients = Array.from({ length: CLIENTS }, () => new TicketClient({ port: server.port }));
try {
  for (const w of WORKLOADS) await runWorkload(clients, { ...w }); // warm-up
  const loadStart = loadavg()[0];
  const rounds = [];
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? WORKLOADS : [...WORKLOADS].reverse();
    const results = {};
    for (const w of order) results[w.name] = await runWorkload(clients, w);
    rounds.push(results);
  }
  const mutex = WORKLOADS[0].name;
  const distinctX = WORKLOADS[3].name;
  const loadEnd = loadavg()[0];
  console.log(
    `${ROUNDS} rounds of ${DURATION_MS} ms, ${LOOPS} loops over ${CLIENTS} clients, load ${loadStart} → ${loadEnd}\n`,
  );
  const rows = [];
  console.log('| workload | cycles/s | p99 ms | ratio cycles/s | against |');
  console.log('|---|---|---|---|---|');
  for (const w of WORKLOADS) {
    const against = w.name.startsWith('distinct') ? distinctX : mutex;
    const cells = rounds.map((r) => r[w.name]);
    const ratio = median(rounds.map((r) => r[w.name].cyclesPerS / r[against].cyclesPerS));
    const spread = rounds.map((r) => (r[w.name].cyclesPerS / r[against].cyclesPerS).toFixed(2));
    rows.push({
      workload: w.name,
      cyclesPerS: median(cells.map((c) => c.cyclesPerS)),
      p99Ms: median(cells.map((c) => c.p99Ms)),
      ...(w.name === against ? {} : { ratio, against, ratios: spread.map(Number) }),
    });
    console.log(
      `| ${w.name} | ${Math.round(median(cells.map((c) => c.cyclesPerS))).toLocaleString('en')} | ` +
        `${median(cells.map((c) => c.p99Ms)).toFixed(2)} | ` +
        `${w.name === against ? '' : `${ratio.toFixed(2)}× (${Math.min(...spread)}–${Math.max(...spread)})`} | ` +
        `${w.name === against ? '' : against} |`,
    );
  }
  const out = join(root, 'bench', 'ticketing', 'modes-results.json');
  const meta = { rounds: ROUNDS, durationMs: DURATION_MS, loops: LOOPS, clients: CLIENTS, loadStart, loadEnd };
  writeFileSync(out, `${JSON.stringify({ ...meta, rows }, null, 2)}\n`);
} finally {
  await Promise.all(clients.map((c) => c.close()));
  server.child.kill('SIGTERM');
}
