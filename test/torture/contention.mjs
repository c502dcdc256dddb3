// The contention run: N worker processes (worker.mjs) compete for a few ids while a nemesis
// SIGKILLs (and respawns) and SIGSTOPs/SIGCONTs them; then the independent checker reads the logs.
// Used by contention.test.ts (bounded) and soak.mjs (long). Imports nothing from the lease.
//
// The nemesis logs every signal with the time taken just BEFORE it is sent (so a kill time is never
// later than the death it causes). Half of its victims are chosen as the current holder of an id
// (the lease record's owner, `w<slot>-<pid>`, whose own log shows that grant valid): a targeted
// SIGSTOP lasts 1.2–3 TTLs, so a holder is suspended past its expiry, a competitor takes over, and
// the holder wakes up to a renew that must fail and a write the resource must fence out. Other suspensions are short and
// random (often in the middle of a transition, holding the transition lock).
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { check, parseLines } from './checker.mjs';
import { readResource } from './resource.mjs';

const WORKER = fileURLToPath(new URL('./worker.mjs', import.meta.url));

const DEFAULTS = {
  seconds: 10,
  workers: 8,
  ids: 4,
  ttlMs: 300,
  transitionTimeoutMs: 150,
  holdMaxMs: 400,
  pauseMaxMs: 30,
  actionEveryMs: [60, 250],
  maxStopped: 3,
  atLeast: { kills: 5, suspensions: 5 },
};

/**
 * Runs one contention round in a fresh directory under `root`.
 * @param {import('./contention.d.mts').ContentionOptions} options
 * @returns {Promise<import('./contention.d.mts').ContentionResult>}
 */
export async function runContention(options) {
  const o = { ...DEFAULTS, ...options };
  const runDir = fs.mkdtempSync(join(o.root, 'flocklease-torture-'));
  const leaseDir = join(runDir, 'leases');
  const logDir = join(runDir, 'logs');
  const resourceDir = join(runDir, 'resource');
  const stopFile = join(runDir, 'stop');
  fs.mkdirSync(logDir, { recursive: true });
  const ids = Array.from({ length: o.ids }, (_, i) => `session-${i}`);
  const nemesisLog = [];
  const nemesisFd = fs.openSync(join(runDir, 'nemesis.log'), 'a');
  const record = (event) => {
    nemesisLog.push(event);
    fs.writeSync(nemesisFd, `${JSON.stringify(event)}\n`);
  };
  const random = (lo, hi) => lo + Math.random() * (hi - lo);

  /** slot → live worker */
  const slots = new Map();
  /** pid → worker (also dead ones, until they are reaped) */
  const byPid = new Map();
  const exits = [];

  function startWorker(slot) {
    const config = {
      leaseDir,
      logDir,
      resourceDir,
      stopFile,
      slot,
      ids,
      ttlMs: o.ttlMs,
      transitionTimeoutMs: o.transitionTimeoutMs,
      holdMaxMs: o.holdMaxMs,
      pauseMaxMs: o.pauseMaxMs,
      mutant: o.mutant,
    };
    const child = spawn(process.execPath, [WORKER, JSON.stringify(config)], { stdio: ['ignore', 'ignore', 'pipe'] });
    const worker = { slot, child, pid: child.pid, stopped: false, killed: false, stderr: '' };
    child.stderr.on('data', (chunk) => (worker.stderr = (worker.stderr + chunk).slice(-4000)));
    worker.exited = once(child, 'exit').then(([code, signal]) => {
      record({
        ev: 'exit',
        pid: worker.pid,
        slot,
        code,
        signal,
        at: Date.now(),
        ...(code !== 0 && !worker.killed && { stderr: worker.stderr }),
      });
    });
    exits.push(worker.exited);
    record({ ev: 'spawn', pid: worker.pid, slot, at: Date.now() });
    slots.set(slot, worker);
    byPid.set(worker.pid, worker);
    return worker;
  }

  function kill(worker) {
    worker.killed = true;
    record({ ev: 'kill', pid: worker.pid, slot: worker.slot, at: Date.now() });
    worker.child.kill('SIGKILL');
  }

  function stop(worker) {
    worker.stopped = true;
    record({ ev: 'stop', pid: worker.pid, slot: worker.slot, at: Date.now() });
    worker.child.kill('SIGSTOP');
  }

  function cont(worker) {
    if (!worker.stopped) return;
    worker.stopped = false;
    if (worker.killed) return;
    record({ ev: 'cont', pid: worker.pid, slot: worker.slot, at: Date.now() });
    worker.child.kill('SIGCONT');
  }

  /** The events of a worker's log so far (a line still being written is left for the next read). */
  function loggedSoFar(name) {
    const text = fs.readFileSync(join(logDir, name), 'utf8');
    return parseLines(text.slice(0, text.lastIndexOf('\n') + 1), name);
  }

  /** The live, running worker that the record of `id` names, if its own log shows that grant
   * valid for a while yet (a grant not yet logged is not one the checker can see taken over). */
  function holderOf(id) {
    try {
      const safe = fs.readdirSync(leaseDir).find((name) => name.startsWith(`${id}-`) && name.endsWith('.lease.json'));
      if (safe === undefined) return undefined;
      const record = /"owner":"w\d+-(\d+)","token":(\d+)/.exec(fs.readFileSync(join(leaseDir, safe), 'utf8'));
      const worker = record && byPid.get(Number(record[1]));
      if (!worker || worker.killed || worker.stopped) return undefined;
      const expiries = loggedSoFar(`w${worker.slot}-${worker.pid}.log`)
        .filter((event) => event.id === id && event.token === record[2])
        .map((event) => event.expiry ?? 0);
      return Math.max(0, ...expiries) > Date.now() + 50 ? worker : undefined;
    } catch {
      return undefined; // a record or log mid-write, or a worker's log not yet created
    }
  }

  const live = () => [...slots.values()].filter((w) => !w.killed);
  const pick = (list) => list[Math.floor(Math.random() * list.length)];
  /** A holder of a random id (past `seconds`, of any id that has one). */
  const someHolder = () => {
    const from = Math.floor(Math.random() * ids.length);
    const tries = Date.now() < deadline ? 1 : ids.length;
    for (let i = 0; i < tries; i++) {
      const id = ids[(from + i) % ids.length];
      const holder = holderOf(id);
      if (holder !== undefined) return { id, holder };
    }
    return undefined;
  };

  for (let slot = 0; slot < o.workers; slot++) startWorker(slot);
  const pendingConts = new Set();
  const deadline = Date.now() + o.seconds * 1000;
  // The outcomes the random faults make least often, and enough faults on a loaded machine (where
  // a respawn takes seconds): the run goes on past `seconds`, for at most as long again, until the
  // nemesis has sent `atLeast` kills and suspensions and the workers have logged a crash takeover
  // (an acquire begun after a logged holder's kill on its id), a holder losing its lease, and a
  // write fenced out (a rejected write is a stale one in a run the checker passes). Past
  // `seconds`, every kill aims at a holder.
  const lastChance = deadline + o.seconds * 1000;
  const holderKills = [];
  let kills = 0;
  let suspensions = 0;
  let takenOver = false;
  /** What the run still lacks ([] once it has it all). */
  const missing = () => {
    const lacks = [];
    if (kills < o.atLeast.kills) lacks.push('kill');
    if (suspensions < o.atLeast.suspensions) lacks.push('stop');
    const events = fs.readdirSync(logDir).flatMap(loggedSoFar);
    takenOver ||= events.some(
      (event) => event.ev === 'acquire' && holderKills.some((k) => k.id === event.id && k.at < event.begin),
    );
    if (!takenOver) lacks.push('kill');
    const lost = events.some((event) => event.ev === 'loss');
    if (!lost || !events.some((event) => event.ev === 'write' && event.accepted === false)) lacks.push('long stop');
    return lacks;
  };
  for (let lacks = []; Date.now() < deadline || (Date.now() < lastChance && (lacks = missing()).length > 0);) {
    await sleep(random(o.actionEveryMs[0], o.actionEveryMs[1]));
    // Random faults; past `seconds`, one of those the run still lacks.
    const roll = lacks.length === 0 ? Math.random() : { kill: 0, 'long stop': 0.3, stop: 0.6 }[pick(lacks)];
    if (roll < 0.3) {
      // SIGKILL: half the time (every time while the run lacks something) a holder, else anyone.
      const held = (Math.random() < 0.5 || lacks.length > 0) && someHolder();
      if (held) holderKills.push({ id: held.id, at: Date.now() });
      const victim = held ? held.holder : pick(live());
      kill(victim);
      kills++;
      await victim.exited;
      startWorker(victim.slot); // the slot lives on as a new process
    } else if (roll < 0.8) {
      // SIGSTOP: a holder past its expiry (1.2–3 TTLs), or anyone briefly (often mid-transition).
      const long = roll < 0.55;
      const victim = long ? someHolder()?.holder : pick(live());
      if (victim === undefined || victim.stopped || live().filter((w) => w.stopped).length >= o.maxStopped) continue;
      const ms = long ? random(1.2, 3) * o.ttlMs : random(5, 150);
      stop(victim);
      suspensions++;
      const timer = sleep(ms).then(() => {
        cont(victim);
        pendingConts.delete(timer);
      });
      pendingConts.add(timer);
    }
  }
  // Wind down: wake everyone, ask them to release and exit, reap.
  for (const worker of byPid.values()) cont(worker);
  await Promise.all(pendingConts);
  fs.writeFileSync(stopFile, '');
  const reaped = await Promise.race([Promise.all(exits).then(() => true), sleep(15_000).then(() => false)]);
  if (!reaped) {
    for (const worker of live()) if (worker.child.exitCode === null && worker.child.signalCode === null) kill(worker);
    await Promise.all(exits);
  }
  fs.closeSync(nemesisFd);

  const history = loadHistory(runDir);
  const result = check(history);
  return { runDir, history, ...result };
}

/** Reads a run directory back into a history for the checker. */
export function loadHistory(runDir) {
  const logDir = join(runDir, 'logs');
  const workers = [];
  for (const name of fs.readdirSync(logDir).sort()) {
    const match = /^w(\d+)-(\d+)\.log$/.exec(name);
    if (!match) continue;
    const events = parseLines(fs.readFileSync(join(logDir, name), 'utf8'), name);
    workers.push({ pid: Number(match[2]), slot: Number(match[1]), events });
  }
  const nemesis = parseLines(fs.readFileSync(join(runDir, 'nemesis.log'), 'utf8'), 'nemesis.log');
  const resource = readResource(join(runDir, 'resource'));
  const records = {};
  const leaseDir = join(runDir, 'leases');
  if (fs.existsSync(leaseDir)) {
    for (const name of fs.readdirSync(leaseDir)) {
      if (!name.endsWith('.lease.json')) continue;
      const record = JSON.parse(fs.readFileSync(join(leaseDir, name), 'utf8').replace(/"token":(\d+)/, '"token":"$1"'));
      if (typeof record.session === 'string') records[record.session] = { owner: record.owner, token: record.token };
    }
  }
  return { workers, nemesis, resource, records };
}
