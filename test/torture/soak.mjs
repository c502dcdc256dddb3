// The long torture run: `npm run soak -- --seconds 600` (builds first). Alternates rounds of the
// contention run (contention.mjs: N workers, a few ids, random SIGKILLs and SIGSTOP/SIGCONT, then
// the independent checker) between a disk directory and tmpfs, and after each round measures the
// crash takeover directly: a holder process is SIGKILLed while another spins on acquire, and the
// time from the kill to the survivor's successful acquire is recorded. Prints a line per round
// and the totals; exits 1 if the checker found any violation (the run directory is kept then).
// Workers start all through the run and import dist/ as they do: rebuilding it meanwhile (npm run
// build, or npm run lint, whose npm pack rebuilds) makes one fail to load, counted as a violation.
//
// Options: --seconds 600  --workers 8  --ids 4  --ttl 300  --round 60  --probes 10
//          --dirs <disk>,<tmpfs>  (default: the OS temp dir and /dev/shm)
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { formatFigures } from './checker.mjs';
import { runContention } from './contention.mjs';

const AGENT = fileURLToPath(new URL('./agent.mjs', import.meta.url));

function options(argv) {
  const o = { seconds: 600, workers: 8, ids: 4, ttl: 300, round: 60, probes: 10, dirs: undefined };
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i].replace(/^--/, '');
    if (!(name in o)) throw new Error(`unknown option ${argv[i]} (known: ${Object.keys(o).join(', ')})`);
    o[name] = name === 'dirs' ? argv[++i] : Number(argv[++i]);
  }
  const dirs = o.dirs ? o.dirs.split(',') : [os.tmpdir(), ...(fs.existsSync('/dev/shm') ? ['/dev/shm'] : [])];
  o.filesystems = dirs.map((dir) => [fsName(dir), dir]);
  return o;
}

function fsName(dir) {
  const line = fs
    .readFileSync('/proc/mounts', 'utf8')
    .split('\n')
    .map((l) => l.split(' '))
    .filter((m) => m.length > 2 && (dir === m[1] || dir.startsWith(m[1].endsWith('/') ? m[1] : `${m[1]}/`)))
    .sort((a, b) => b[1].length - a[1].length)[0];
  return line ? `${line[2]} ${dir}` : dir;
}

/** A torture agent (agent.mjs) as a plain object: call(command) → reply. */
async function startAgent(dir, ttlMs) {
  const child = spawn(process.execPath, [AGENT, dir, JSON.stringify({ ttlMs })], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const pending = new Map();
  let seq = 0;
  createInterface({ input: child.stdout }).on('line', (line) => {
    const reply = JSON.parse(line);
    pending.get(reply.seq)?.(reply);
    pending.delete(reply.seq);
  });
  const exited = once(child, 'exit');
  exited.then(() => {
    for (const resolve of pending.values()) resolve({ ok: false, code: 'EAGENTEXITED' });
  });
  await new Promise((resolve) => pending.set(0, resolve));
  return {
    child,
    exited,
    call(command) {
      const s = ++seq;
      const reply = new Promise((resolve) => pending.set(s, resolve));
      child.stdin.write(`${JSON.stringify({ ...command, seq: s })}\n`);
      return reply;
    },
  };
}

/** Crash takeover, measured: kill a holder while a survivor spins on acquire. */
async function probeTakeovers(root, count) {
  const dir = fs.mkdtempSync(join(root, 'flocklease-soak-probe-'));
  const TTL = 30_000;
  const latencies = [];
  const survivor = await startAgent(dir, TTL);
  try {
    for (let i = 0; i < count; i++) {
      const holder = await startAgent(dir, TTL);
      const held = await holder.call({ op: 'acquire', id: 'probe', owner: `holder-${i}` });
      if (!held.ok) throw new Error(`probe holder could not acquire: ${held.code} ${held.message}`);
      const spinning = survivor.call({ op: 'spin', id: 'probe', owner: 'survivor', maxMs: 20_000 });
      await sleep(20);
      const killedAt = performance.timeOrigin + performance.now();
      holder.child.kill('SIGKILL');
      const reply = await spinning;
      await holder.exited;
      if (!reply.ok) throw new Error(`survivor failed to take over: ${reply.code} ${reply.message}`);
      if (BigInt(reply.grant.token) <= BigInt(held.grant.token)) throw new Error('takeover token did not increase');
      latencies.push(reply.at - killedAt);
      await survivor.call({ op: 'release', id: 'probe' });
    }
  } finally {
    survivor.child.kill('SIGKILL');
    await survivor.exited;
    fs.rmSync(dir, { recursive: true, force: true });
  }
  return latencies;
}

const percentile = (sorted, p) =>
  sorted.length === 0
    ? undefined
    : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
const ms = (x) => (x === undefined ? '-' : `${x.toFixed(2)} ms`);
const SUMMED = [
  'processes',
  'transitions',
  'acquires',
  'takeovers',
  'refreshes',
  'renews',
  'reclaims',
  'releases',
  'losses',
  'kills',
  'suspensions',
  'writesAccepted',
  'writesRejected',
  'staleRejected',
  'lateAccepted',
  'killTakeovers',
  'handoffs',
  'violations',
];

const o = options(process.argv.slice(2));
const started = Date.now();
const deadline = started + o.seconds * 1000;
const totals = new Map(
  o.filesystems.map(([name]) => [
    name,
    { rounds: 0, figures: Object.fromEntries(SUMMED.map((k) => [k, 0])), probes: [], byProperty: {} },
  ]),
);
const kept = [];
console.log(
  `soak: ${o.seconds} s, ${o.workers} workers on ${o.ids} ids, TTL ${o.ttl} ms, rounds of ${o.round} s, on ${o.filesystems.map(([n]) => n).join(' and ')}`,
);

for (let round = 0; Date.now() < deadline - 5_000; round++) {
  const [name, root] = o.filesystems[round % o.filesystems.length];
  const seconds = Math.max(5, Math.min(o.round, (deadline - Date.now()) / 1000 - 3));
  const result = await runContention({
    root,
    seconds,
    workers: o.workers,
    ids: o.ids,
    ttlMs: o.ttl,
    transitionTimeoutMs: Math.round(o.ttl / 2),
  });
  const latencies = await probeTakeovers(root, o.probes);
  const total = totals.get(name);
  total.rounds++;
  for (const key of SUMMED) total.figures[key] += result.figures[key];
  total.probes.push(...latencies);
  for (const [p, n] of Object.entries(result.byProperty)) total.byProperty[p] = (total.byProperty[p] ?? 0) + n;
  const elapsed = ((Date.now() - started) / 1000).toFixed(0);
  console.log(
    `[${elapsed.padStart(5)} s] round ${round + 1} on ${name} (${seconds.toFixed(0)} s): ${formatFigures(result.figures)}`,
  );
  if (result.violations.length > 0) {
    kept.push(result.runDir);
    console.log(`  VIOLATIONS (logs kept in ${result.runDir}):`);
    for (const v of result.violations.slice(0, 10)) console.log(`    ${v.property}: ${v.message}`);
  } else {
    fs.rmSync(result.runDir, { recursive: true, force: true });
  }
}

console.log(`\nsoak totals after ${((Date.now() - started) / 1000).toFixed(0)} s:`);
let violations = 0;
const summary = {};
for (const [name, total] of totals) {
  const f = total.figures;
  const probes = [...total.probes].sort((a, b) => a - b);
  violations += f.violations;
  summary[name] = {
    rounds: total.rounds,
    processes: f.processes,
    transitions: f.transitions,
    kills: f.kills,
    suspensions: f.suspensions,
    violations: f.violations,
    crashTakeoverMs: { n: probes.length, p50: percentile(probes, 50), p99: percentile(probes, 99), max: probes.at(-1) },
  };
  console.log(
    `  ${name}: ${total.rounds} rounds · processes ${f.processes} · transitions ${f.transitions} (grants ${f.takeovers}, refreshes ${f.refreshes}, renews ${f.renews}, reclaims ${f.reclaims}, releases ${f.releases}) · losses ${f.losses} · kills ${f.kills} · suspensions ${f.suspensions} · fenced writes ${f.writesAccepted} accepted / ${f.writesRejected} rejected (stale ${f.staleRejected}) · violations ${f.violations} ${JSON.stringify(total.byProperty)}`,
  );
  console.log(
    `    crash takeover (SIGKILL → survivor's acquire returned, TTL 30 s): p50 ${ms(percentile(probes, 50))} · p99 ${ms(percentile(probes, 99))} · max ${ms(probes.at(-1))} over ${probes.length} kills`,
  );
}
console.log(`violations: ${violations}${kept.length ? ` (logs kept: ${kept.join(', ')})` : ''}`);
console.log(`summary ${JSON.stringify(summary)}`);
process.exit(violations === 0 ? 0 : 1);
