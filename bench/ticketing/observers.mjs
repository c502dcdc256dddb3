/**
 * The observers' cost (`npm run bench:ticketing -- --observers [--observer-processes 1]`): 1,000
 * observers of one key (`O <key>`, raw TCP connections in observer-worker.mjs processes) while
 * the key changes hands 100 times a second. The changer is two raw connections in this process:
 * one holds the key, the other waits in its queue; every 10 ms the holder releases (`R`), the key
 * passes to the waiter (one change, one rev), and the old holder queues again.
 *
 * A change's delay runs from its grant's reply reaching the new holder to the last of the 1,000
 * observers receiving the `V` with its token, on one clock across the processes
 * (performance.timeOrigin + performance.now()). Only changes every observer received while
 * recording are measured; an observer that missed a rev would show as a rev jump, which is
 * counted. The server is `ticketing serve` with usage-probe.mjs preloaded: its CPU
 * (process.cpuUsage) over each window and its memory (RSS, heap, array buffers) idle, with the
 * observers connected, and at most while the key changes. The observer processes and this one
 * (the changer) report their own CPU over the same window. One warm-up, then `rounds` windows back
 * to back; each figure is the median over the windows, with their range.
 * Results: a markdown table on stdout, JSON in <out>/observers-results.json.
 */
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import net from 'node:net';
import { join } from 'node:path';
import { here, loadavg, medianOf, startProbedTicketing, stop, usage } from './processes.mjs';

const OBSERVERS = 1_000;
const CHANGES_PER_SECOND = 100;
const KEY = 'leader';
const now = () => performance.timeOrigin + performance.now();

/** Two connections handing the key to each other every `periodMs`; the time each grant arrived. */
class Changer {
  /** token → when its grant reached the changer. */
  grants = new Map();
  /** Per hand-off: its release sent → its grant received, ms. */
  handoffMs = [];
  #releasedAt = 0;
  /** Ticks that found the last hand-off not yet granted (skipped: the rate fell short). */
  lateTicks = 0;
  #sockets = [];
  #holder = { conn: -1, token: '' };
  #handingOff = false;
  #timer;
  #firstGrant;

  async start(port, periodMs) {
    for (let conn = 0; conn < 2; conn++) {
      const socket = net.connect({ port, host: '127.0.0.1', noDelay: true });
      let partial = '';
      socket.on('data', (chunk) => {
        const lines = (partial + chunk.toString('latin1')).split('\n');
        partial = lines.pop();
        for (const line of lines) this.#reply(conn, line);
      });
      socket.on('error', (error) => this.#fail(error));
      await once(socket, 'connect');
      this.#sockets.push(socket);
    }
    const granted = new Promise((resolve) => (this.#firstGrant = resolve));
    this.#acquire(0);
    await granted;
    this.#acquire(1); // queued behind conn 0
    const started = performance.now();
    let n = 0;
    const tick = () => {
      this.#release();
      this.#timer = setTimeout(tick, Math.max(0, started + ++n * periodMs - performance.now()));
    };
    this.#timer = setTimeout(tick, periodMs);
  }

  #acquire(conn) {
    this.#sockets[conn].write(`A ${KEY} changer${conn} 60000\n`);
  }

  #release() {
    if (this.#handingOff) {
      this.lateTicks++;
      return;
    }
    this.#handingOff = true;
    this.#releasedAt = now();
    this.#sockets[this.#holder.conn].write(`R ${KEY} ${this.#holder.token}\n`);
  }

  #reply(conn, line) {
    const at = now();
    const fields = line.split(' ');
    if (fields[0] === 'A' && fields[2] === `changer${conn}`) {
      this.grants.set(fields[1], at);
      if (this.#handingOff) this.handoffMs.push(at - this.#releasedAt);
      this.#holder = { conn, token: fields[1] };
      this.#handingOff = false;
      this.#firstGrant?.();
      this.#firstGrant = undefined;
    } else if (fields[0] === 'R') {
      this.#acquire(conn); // queue again, behind the new holder
    } else {
      this.#fail(new Error(`changer${conn}: unexpected reply ${line}`));
    }
  }

  #fail(error) {
    console.error(error);
    process.exit(1);
  }

  close() {
    clearTimeout(this.#timer);
    for (const socket of this.#sockets) socket.destroy();
  }
}

/** Forks the observer processes; resolves once every observer has its first `V`. */
async function startObservers(port, processes) {
  const workers = Array.from({ length: processes }, (_, p) => {
    const count = Math.floor(OBSERVERS / processes) + (p < OBSERVERS % processes ? 1 : 0);
    return fork(join(here, 'observer-worker.mjs'), [JSON.stringify({ port, key: KEY, count })]);
  });
  await Promise.all(workers.map((worker) => once(worker, 'message')));
  return workers;
}

const ask = async (worker, message) => {
  worker.send(message);
  const [reply] = await once(worker, 'message');
  return reply;
};
const cpuSeconds = (cpu) => (cpu.user + cpu.system) / 1e6;
const pick = (memory) => ({ rss: memory.rss, heapUsed: memory.heapUsed, arrayBuffers: memory.arrayBuffers });

function percentile(sorted, q) {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(sorted.length * q) - 1))];
}

/** One measured window: the observers record, the server's memory is sampled every second. */
async function measure(server, workers, changer, durationMs) {
  for (const worker of workers) worker.send('start');
  const serverStart = await usage(server);
  const ownStart = process.cpuUsage();
  const started = now();
  const grantsBefore = changer.grants.size;
  const lateBefore = changer.lateTicks;
  const handoffsBefore = changer.handoffMs.length;
  const peak = pick(serverStart.memory);
  for (let left = durationMs; left > 0; left -= 1_000) {
    await new Promise((resolve) => setTimeout(resolve, Math.min(1_000, left)));
    const { memory } = await usage(server);
    for (const field of Object.keys(peak)) peak[field] = Math.max(peak[field], memory[field]);
  }
  const ended = now();
  const seconds = (ended - started) / 1000;
  const own = process.cpuUsage(ownStart);
  const serverEnd = await usage(server);
  const changes = changer.grants.size - grantsBefore;
  const lateTicks = changer.lateTicks - lateBefore;
  const handoffs = changer.handoffMs.slice(handoffsBefore).sort((a, b) => a - b);
  // The last changes' V are on their way: the observers record until they have landed.
  const lastToken = [...changer.grants].findLast(([, at]) => at <= ended)?.[0];
  const reports = await Promise.all(workers.map((worker) => ask(worker, { stop: lastToken ?? '' })));

  const revs = new Map();
  for (const report of reports) {
    for (const { rev, holder, count, first, last } of report.revs) {
      const seen = revs.get(rev);
      if (seen === undefined) revs.set(rev, { holder, count, first, last });
      else
        Object.assign(seen, {
          count: seen.count + count,
          first: Math.min(seen.first, first),
          last: Math.max(seen.last, last),
        });
    }
  }
  const toLast = [];
  const toFirst = [];
  for (const { holder, count, first, last } of revs.values()) {
    const grantedAt = changer.grants.get(holder);
    // A change at a window's edge reached some observers before they recorded: not measured.
    if (grantedAt === undefined || grantedAt < started || grantedAt > ended || count !== OBSERVERS) continue;
    toLast.push(last - grantedAt);
    toFirst.push(first - grantedAt);
  }
  toLast.sort((a, b) => a - b);
  toFirst.sort((a, b) => a - b);
  const serverCpu = {
    user: serverEnd.cpu.user - serverStart.cpu.user,
    system: serverEnd.cpu.system - serverStart.cpu.system,
  };
  return {
    seconds,
    changesPerSecond: changes / seconds,
    lateTicks,
    measuredChanges: toLast.length,
    lastObserverMs: { p50: percentile(toLast, 0.5), p99: percentile(toLast, 0.99), max: toLast.at(-1) },
    firstObserverMs: { p50: percentile(toFirst, 0.5), p99: percentile(toFirst, 0.99) },
    handoffMs: { p50: percentile(handoffs, 0.5), p99: percentile(handoffs, 0.99) },
    cpuShare: {
      server: cpuSeconds(serverCpu) / seconds,
      serverUser: serverCpu.user / 1e6 / seconds,
      serverSys: serverCpu.system / 1e6 / seconds,
      // Each over its own recording, which runs on past the window while the last `V`s land.
      observers: reports.map((report) => cpuSeconds(report.cpu) / report.seconds),
      changer: cpuSeconds(own) / seconds,
    },
    serverMemoryPeak: peak,
    skippedRevs: reports.reduce((n, report) => n + report.skippedRevs, 0),
    strayLines: reports.reduce((n, report) => n + report.strayLines, 0),
  };
}

const spread = (values) => ({ median: medianOf(values), min: Math.min(...values), max: Math.max(...values) });

function summarise(runs) {
  const of = (f) => spread(runs.map(f));
  return {
    changesPerSecond: of((r) => r.changesPerSecond),
    measuredChanges: runs.reduce((n, r) => n + r.measuredChanges, 0),
    lastObserverP50Ms: of((r) => r.lastObserverMs.p50),
    lastObserverP99Ms: of((r) => r.lastObserverMs.p99),
    lastObserverMaxMs: of((r) => r.lastObserverMs.max),
    firstObserverP50Ms: of((r) => r.firstObserverMs.p50),
    handoffP50Ms: of((r) => r.handoffMs.p50),
    handoffP99Ms: of((r) => r.handoffMs.p99),
    serverCpuShare: of((r) => r.cpuShare.server),
    serverUserShare: of((r) => r.cpuShare.serverUser),
    serverSysShare: of((r) => r.cpuShare.serverSys),
    observersCpuShare: of((r) => r.cpuShare.observers.reduce((a, b) => a + b, 0)),
    // Per change (one `V` to each observer): what the rate does not change, unlike the shares.
    serverCpuMsPerChange: of((r) => (1000 * r.cpuShare.server) / r.changesPerSecond),
    observersCpuMsPerChange: of((r) => (1000 * r.cpuShare.observers.reduce((a, b) => a + b, 0)) / r.changesPerSecond),
    changerCpuShare: of((r) => r.cpuShare.changer),
    lateTicks: runs.reduce((n, r) => n + r.lateTicks, 0),
    skippedRevs: runs.reduce((n, r) => n + r.skippedRevs, 0),
    strayLines: runs.reduce((n, r) => n + r.strayLines, 0),
  };
}

function table(summary, memory, setup) {
  const mb = (bytes) => (bytes / 2 ** 20).toFixed(1);
  const row = (what, s, format) => `| ${what} | ${format(s.median)} | ${format(s.min)}–${format(s.max)} |`;
  const msF = (v) => v.toFixed(2);
  const pct = (v) => `${(100 * v).toFixed(1)} %`;
  const procs = setup.observerProcesses === 1 ? 'one process' : `${setup.observerProcesses} processes`;
  return [
    '| figure | median | windows’ range |',
    '|---|--:|--:|',
    row('changes/s', summary.changesPerSecond, (v) => v.toFixed(1)),
    row('delay to the last observer’s `V`, p50 ms', summary.lastObserverP50Ms, msF),
    row('delay to the last observer’s `V`, p99 ms', summary.lastObserverP99Ms, msF),
    row('delay to the last observer’s `V`, max ms', summary.lastObserverMaxMs, msF),
    row('delay to the first observer’s `V`, p50 ms', summary.firstObserverP50Ms, msF),
    row('hand-off (`R` sent → the waiter’s grant received), p50 ms', summary.handoffP50Ms, msF),
    row('hand-off, p99 ms', summary.handoffP99Ms, msF),
    row('server CPU (user + sys)', summary.serverCpuShare, pct),
    row('server CPU, user', summary.serverUserShare, pct),
    row('server CPU, sys', summary.serverSysShare, pct),
    row('server CPU per change (1,000 `V`s), ms', summary.serverCpuMsPerChange, msF),
    row(`observers’ CPU (${procs}, together)`, summary.observersCpuShare, pct),
    row('observers’ CPU per change, ms', summary.observersCpuMsPerChange, msF),
    row('changer’s CPU (2 connections, this process)', summary.changerCpuShare, pct),
    '',
    '| server memory, MiB | RSS | heap used | array buffers |',
    '|---|--:|--:|--:|',
    ...Object.entries(memory).map(
      ([what, m]) => `| ${what} | ${mb(m.rss)} | ${mb(m.heapUsed)} | ${mb(m.arrayBuffers)} |`,
    ),
  ].join('\n');
}

export async function observersMain(options) {
  const setup = {
    observers: OBSERVERS,
    changesPerSecond: CHANGES_PER_SECOND,
    observerProcesses: options.observerProcesses,
  };
  const loadStart = loadavg();
  const server = await startProbedTicketing();
  let workers = [];
  let changer;
  const runs = [];
  const memory = {};
  try {
    memory.idle = pick((await usage(server)).memory);
    workers = await startObservers(server.port, setup.observerProcesses);
    memory['1,000 observers, key unchanged'] = pick((await usage(server)).memory);
    changer = new Changer();
    await changer.start(server.port, 1000 / CHANGES_PER_SECOND);
    await new Promise((resolve) => setTimeout(resolve, options.warmupMs));
    for (let round = 1; round <= options.rounds; round++) {
      const run = await measure(server, workers, changer, options.durationMs);
      runs.push(run);
      console.error(
        `window ${round}: ${run.changesPerSecond.toFixed(1)} changes/s, ${run.measuredChanges} measured; ` +
          `last observer p50 ${run.lastObserverMs.p50?.toFixed(2)} ms p99 ${run.lastObserverMs.p99?.toFixed(2)} ms; ` +
          `server ${(100 * run.cpuShare.server).toFixed(1)} % CPU, observers ${run.cpuShare.observers.map((s) => `${(100 * s).toFixed(1)} %`).join(' + ')}, ` +
          `changer ${(100 * run.cpuShare.changer).toFixed(1)} %`,
      );
    }
    memory['most while the key changes'] = runs.reduce(
      (peak, run) => Object.fromEntries(Object.keys(peak).map((f) => [f, Math.max(peak[f], run.serverMemoryPeak[f])])),
      memory['1,000 observers, key unchanged'],
    );
  } finally {
    changer?.close();
    await Promise.all(
      workers.map(async (worker) => {
        if (worker.exitCode !== null) return;
        worker.send('close');
        await once(worker, 'exit');
      }),
    );
    await stop(server.child);
  }
  const loadEnd = loadavg();
  const summary = summarise(runs);
  const run = `${options.durationMs / 1000} s windows after ${options.warmupMs / 1000} s warm-up, ${options.rounds} window(s)`;
  const checks =
    summary.skippedRevs === 0 && summary.strayLines === 0
      ? 'every observer received every rev, in order, and nothing else'
      : `${summary.skippedRevs} revs skipped by observers, ${summary.strayLines} unexpected lines`;
  console.log(
    [
      `### Observers: ${OBSERVERS.toLocaleString('en-US')} observers of one key, a hand-off every ${1000 / CHANGES_PER_SECOND} ms (${run})`,
      '',
      `${cpus().length} CPUs, Node ${process.version}; load average ${loadStart[0]} at start, ${loadEnd[0]} at end. ` +
        `A change's delay: its grant reaching the new holder → the ${OBSERVERS.toLocaleString('en-US')}th observer receiving its \`V\`. CPU in seconds per second of the window.`,
      '',
      table(summary, memory, setup),
      '',
      `Check: ${checks}; ${summary.measuredChanges} changes measured; ${summary.lateTicks} hand-offs late (not yet granted at the next tick).`,
    ].join('\n'),
  );
  mkdirSync(options.out, { recursive: true });
  writeFileSync(
    join(options.out, 'observers-results.json'),
    `${JSON.stringify({ date: new Date().toISOString(), machine: { cpus: cpus().length, node: process.version }, load: { start: loadStart, end: loadEnd }, options, setup, summary, memory, runs }, null, 2)}\n`,
  );
  if (summary.skippedRevs > 0 || summary.strayLines > 0 || summary.measuredChanges === 0) process.exitCode = 1;
}
