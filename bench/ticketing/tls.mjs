/**
 * TLS's cost per request: `npm run bench:ticketing -- --tls [--rounds 5] [--duration 3s] [--warmup 1s]`.
 *
 * The C load generator speaks plain TCP only, so every side is driven by the same Node load
 * generator: worker.mjs's TicketClient worker in 4 processes × 16 loops, distinct keys, acquire +
 * release cycles. Each process has one client (a pipelined connection and a release lane), so 4
 * connections with 16 cycles in flight on each: "distinct 4×16" as in bench.mjs. The servers are
 * three `ticketing serve`s: plain TCP, TLS (a server certificate) and mutual TLS (`--tls-ca`, the
 * clients present certificates), with certificates from ticketing/test/certs.mjs. The clients
 * connect before the measured window, so it holds no handshakes: this is TLS's cost per request on
 * established connections. Every round runs every side, in an order that rotates by round, so a
 * drift in the machine's load favours no side; ratios are per round (÷ plain), then the median and
 * range over rounds. A run's processes share one measured window (a common start time, after
 * start-up and the warm-up); CPU is read from /proc/<pid>/stat over it: the server's per cycle,
 * and the four load generator processes' together.
 * Results: a markdown table on stdout, JSON in <out>/tls-results.json (default bench/ticketing/).
 */
import { once } from 'node:events';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';
import { createCa } from '../../ticketing/test/certs.mjs';
import { fmt, loadavg, medianOf, readPemFiles, runInChild, startTicketing, stop } from './processes.mjs';

const PROCESSES = 4;
const LOOPS = 16;
/** Time allowed for the processes to start and connect before the warm-up counts: under load, Node
 * takes a second or more to start. A process that starts later measures from its first answer (no
 * warm-up), which a quick run, whose numbers mean nothing, accepts. */
const startUpMs = (options) => (options.quick ? 300 : 2_000);

/** The three servers and how their clients connect; `tls` holds PEM file paths. */
async function makeSides(ca) {
  const server = await ca.issue({ name: 'server', hosts: ['127.0.0.1', 'localhost'], usage: ['serverAuth'] });
  const client = await ca.issue({ name: 'client', usage: ['clientAuth'] });
  const serverTls = ['--tls-cert', server.certFile, '--tls-key', server.keyFile];
  return [
    { id: 'plain', flags: [] },
    { id: 'TLS', flags: serverTls, tls: { ca: ca.certFile } },
    {
      id: 'mutual TLS',
      flags: [...serverTls, '--tls-ca', ca.certFile],
      tls: { ca: ca.certFile, cert: client.certFile, key: client.keyFile },
    },
  ];
}

/** The protocol and cipher a client negotiates with `side`'s server (for the record). */
async function negotiated(side) {
  const socket = tls.connect({ host: '127.0.0.1', port: side.server.port, ...readPemFiles(side.tls) });
  await once(socket, 'secureConnect');
  const result = { protocol: socket.getProtocol(), cipher: socket.getCipher().name };
  // end, not destroy: the server must read the client's Finished, or it logs a failed handshake.
  socket.end();
  await once(socket, 'close');
  return result;
}

/** One side for one round: the processes run at once; their cycles add up, CPU per cycle from the sums. */
async function runSide(side, round, options) {
  const measureAt = Date.now() + startUpMs(options) + options.warmupMs;
  const workers = await Promise.all(
    Array.from({ length: PROCESSES }, (_, p) =>
      runInChild({
        system: 'ticketing',
        workload: 'distinct',
        port: side.server.port,
        workers: LOOPS,
        connections: 2, // one TicketClient: its pipelined connection and its release lane
        durationMs: options.durationMs,
        warmupMs: options.warmupMs,
        prefix: `t${round}${side.id.replace(/\W/g, '')}p${p}`,
        tls: side.tls,
        serverPid: side.server.child.pid,
        measureAt,
      }),
    ),
  );
  const cyclesPerSecond = workers.reduce((sum, w) => sum + w.cyclesPerSecond, 0);
  // One window for all (measureAt), so the server's CPU over it is the same in each: their median.
  const serverCpuShare = medianOf(workers.map((w) => w.serverCpuMs / 1000 / w.seconds));
  const loadgenCpuShare = workers.reduce((sum, w) => sum + w.cpuMs / 1000 / w.seconds, 0);
  return {
    cyclesPerSecond,
    p99Ms: Math.max(...workers.map((w) => w.p99Ms)),
    serverUsPerCycle: (serverCpuShare * 1e6) / cyclesPerSecond,
    serverCpuShare,
    loadgenUsPerCycle: (loadgenCpuShare * 1e6) / cyclesPerSecond,
    loadgenCpuShare,
    failures: workers.reduce((n, w) => n + w.failures, 0),
    warmedMs: Math.min(...workers.map((w) => w.warmedMs)),
    processes: workers,
  };
}

const spread = (values) => ({ median: medianOf(values), min: Math.min(...values), max: Math.max(...values) });

export async function tlsMain(options) {
  const ca = await createCa();
  const sides = await makeSides(ca);
  const loadStart = loadavg();
  const runs = Object.fromEntries(sides.map((side) => [side.id, []]));
  let negotiation;
  try {
    for (const side of sides) side.server = await startTicketing(...side.flags);
    negotiation = { TLS: await negotiated(sides[1]), 'mutual TLS': await negotiated(sides[2]) };
    for (let round = 1; round <= options.rounds; round++) {
      const order = sides.map((_, i) => sides[(i + round - 1) % sides.length]);
      for (const side of order) {
        const run = await runSide(side, round, options);
        runs[side.id].push(run);
        console.error(
          `round ${round} ${side.id.padEnd(10)} ${fmt(run.cyclesPerSecond).padStart(7)} cycles/s  p99 ${run.p99Ms.toFixed(2)} ms  ` +
            `server ${run.serverUsPerCycle.toFixed(1)} µs/cycle (${(100 * run.serverCpuShare).toFixed(0)} % CPU)  ` +
            `load generators ${run.loadgenUsPerCycle.toFixed(1)} µs/cycle (${(100 * run.loadgenCpuShare).toFixed(0)} % CPU)`,
        );
      }
    }
  } finally {
    for (const side of sides) if (side.server) await stop(side.server.child);
    ca.remove();
  }
  const loadEnd = loadavg();

  const summary = {};
  for (const { id } of sides) {
    const list = runs[id];
    const m = (field) => medianOf(list.map((run) => run[field]));
    summary[id] = {
      cyclesPerSecond: spread(list.map((run) => run.cyclesPerSecond)),
      p99Ms: m('p99Ms'),
      serverUsPerCycle: m('serverUsPerCycle'),
      serverCpuShare: m('serverCpuShare'),
      loadgenUsPerCycle: m('loadgenUsPerCycle'),
      loadgenCpuShare: m('loadgenCpuShare'),
      failures: list.reduce((n, run) => n + run.failures, 0),
      minWarmedMs: Math.min(...list.map((run) => run.warmedMs)),
    };
    if (id === 'plain') continue;
    const plain = runs.plain;
    summary[id].vsPlain = {
      cyclesPerSecond: spread(list.map((run, i) => run.cyclesPerSecond / plain[i].cyclesPerSecond)),
      serverUsPerCycle: spread(list.map((run, i) => run.serverUsPerCycle / plain[i].serverUsPerCycle)),
    };
  }

  const pct = (share) => `${(100 * share).toFixed(0)} %`;
  const ratio = (r) => `${r.median.toFixed(3)}× (${r.min.toFixed(3)}–${r.max.toFixed(3)})`;
  const rows = [
    '| side | cycles/s (median) | cycles/s range | ÷ plain cycles/s (rounds’ range) | p99 ms | server CPU µs/cycle | ÷ plain server CPU | server CPU share | load generators CPU µs/cycle | load generators CPU share |',
    '|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
    ...sides.map(({ id }) => {
      const s = summary[id];
      const c = s.cyclesPerSecond;
      return (
        `| ${id} | ${fmt(c.median)} | ${fmt(c.min)}–${fmt(c.max)} | ${s.vsPlain ? ratio(s.vsPlain.cyclesPerSecond) : ''} | ` +
        `${s.p99Ms.toFixed(2)} | ${s.serverUsPerCycle.toFixed(1)} | ${s.vsPlain ? ratio(s.vsPlain.serverUsPerCycle) : ''} | ` +
        `${pct(s.serverCpuShare)} | ${s.loadgenUsPerCycle.toFixed(1)} | ${pct(s.loadgenCpuShare)} |`
      );
    }),
  ];
  const failures = sides.reduce((n, { id }) => n + summary[id].failures, 0);
  const minWarmedMs = Math.min(...sides.map(({ id }) => summary[id].minWarmedMs));
  const run = `${options.durationMs / 1000} s per run after ${options.warmupMs / 1000} s warm-up, ${options.rounds} interleaved round(s)`;
  console.log(
    [
      `### TLS's cost: plain TCP, TLS and mutual TLS, distinct ${PROCESSES}×${LOOPS} (TicketClient in ${PROCESSES} processes; ${run})`,
      '',
      `${cpus().length} CPUs, Node ${process.version} (OpenSSL ${process.versions.openssl}), ${negotiation.TLS.protocol} ${negotiation.TLS.cipher}; ` +
        `load average ${loadStart[0]} at start, ${loadEnd[0]} at end. Medians over rounds; p99 is the highest of the processes'.`,
      '',
      ...rows,
      '',
      `Check: ${failures === 0 ? 'every acquire was granted and every release matched in every run' : `${failures} refused acquires or failed releases`}; ` +
        `every process loaded the server for at least ${minWarmedMs} ms before the common window` +
        `${minWarmedMs > 0 ? '' : ' (NOT ALWAYS: some window opened before all four processes were loading)'}.`,
    ].join('\n'),
  );
  mkdirSync(options.out, { recursive: true });
  const machine = { cpus: cpus().length, node: process.version, openssl: process.versions.openssl };
  writeFileSync(
    join(options.out, 'tls-results.json'),
    `${JSON.stringify({ date: new Date().toISOString(), machine, negotiation, load: { start: loadStart, end: loadEnd }, options, setup: { processes: PROCESSES, loops: LOOPS }, summary, runs }, null, 2)}\n`,
  );
  if (failures > 0) process.exitCode = 1;
}
