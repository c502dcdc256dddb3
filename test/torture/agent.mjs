// A lease-holding child process for the torture scenarios, driven by JSON lines on stdin; each
// command carries a `seq` and gets one JSON line back with the same `seq` (commands run
// concurrently, so a command can be answered while an earlier one is stuck or stopped).
//
//   node agent.mjs <leaseDir> '<json Lease options: ttlMs, transitionTimeoutMs>'
//
//   {op:'acquire', id, owner, abortAfterMs?}      → {grant}
//   {op:'renew', id, abortAfterMs?} / {op:'release', id}   (the grant this agent holds for id)
//   {op:'spin', id, owner, maxMs, pollMs?}        → acquire in a loop (tight, or every pollMs)
//                                                   until it succeeds: {grant, at, attempts,
//                                                   refusedUntil (the last ELEASEHELD)}
//   {op:'refused'}                                → {refusedUntil}: the running spin's last ELEASEHELD so far
//   {op:'fault', action:'fail'|'kill'|'stop'|'stall', step, code?, count?, ms?} / {op:'clear'}
//   {op:'fds'}                                    → {fds: [{fd, target}]} (this process's descriptors)
//   {op:'events'}                                 → the diagnostics_channel messages seen so far
// Errors answer {ok:false, code, name, message, syscall, path, committed, holder}. Times (`at`,
// `started`, `settled`) are epoch milliseconds with sub-millisecond precision
// (performance.timeOrigin + performance.now()), comparable across processes.
import diagnostics from 'node:diagnostics_channel';
import fs from 'node:fs';
import { createInterface } from 'node:readline';
import { Lease } from '../../dist/index.js';
import { faults } from '../../dist/flock/io.js';

const [dir, json] = process.argv.slice(2);
const lease = new Lease(dir, JSON.parse(json ?? '{}'));
const now = () => performance.timeOrigin + performance.now();
const grants = new Map();
/** The running spin's last refusal (`refused`), while it spins. */
let spinRefusedUntil;
const show = (g) => ({ sessionId: g.sessionId, owner: g.owner, token: String(g.token), expiry: g.expiry.getTime() });
const reply = (value) => process.stdout.write(`${JSON.stringify(value)}\n`);

const events = [];
for (const name of ['acquire', 'takeover', 'renew', 'reclaim', 'release', 'loss']) {
  diagnostics.subscribe(`flocklease:${name}`, (message) => {
    const { grant, previous, holder, ...rest } = message;
    delete rest.lease; // the Lease object itself: not data
    events.push({
      channel: name,
      ...rest,
      ...(grant && { grant: show(grant) }),
      ...(previous && { previous: { owner: previous.owner, token: String(previous.token) } }),
      ...(holder && { holder: { owner: holder.owner, token: String(holder.token) } }),
      ...(rest.token !== undefined && { token: String(rest.token) }),
      ...(rest.expiredAt && { expiredAt: rest.expiredAt.getTime() }),
    });
  });
}

function signalFor(command) {
  if (command.abortAfterMs === undefined) return undefined;
  const controller = new AbortController();
  setTimeout(
    () => controller.abort(Object.assign(new Error('the caller gave up'), { code: 'EGAVEUP' })),
    command.abortAfterMs,
  );
  return controller.signal;
}

const ops = {
  async acquire({ id, owner, waitMs, ...command }) {
    const grant = await lease.acquire(id, owner, { waitMs, signal: signalFor(command) });
    grants.set(id, grant);
    return { grant: show(grant) };
  },
  async renew({ id, ...command }) {
    const grant = await lease.renew(grants.get(id), { signal: signalFor(command) });
    grants.set(id, grant);
    return { grant: show(grant) };
  },
  async release({ id }) {
    await lease.release(grants.get(id));
    return {};
  },
  async spin({ id, owner, maxMs = 10_000, pollMs }) {
    const until = now() + maxMs;
    let refusedUntil;
    spinRefusedUntil = undefined;
    for (let attempts = 1; ; attempts++) {
      try {
        const grant = await lease.acquire(id, owner);
        const at = now();
        grants.set(id, grant);
        return { grant: show(grant), at, attempts, refusedUntil };
      } catch (error) {
        if (error.code !== 'ELEASEHELD' || now() > until) throw error;
        refusedUntil = spinRefusedUntil = now();
      }
      if (pollMs !== undefined) await new Promise((resolve) => setTimeout(resolve, pollMs));
      else if (attempts % 64 === 0) await new Promise(setImmediate); // let stdin be read
    }
  },
  refused() {
    return { refusedUntil: spinRefusedUntil };
  },
  fault({ action, step, code, count = 1, ms }) {
    if (action === 'fail') faults.fail(step, code, count);
    else if (action === 'kill') faults.kill(step);
    else if (action === 'stop') faults.stop(step);
    else if (action === 'stall') faults.stall(step, ms, count);
    else throw new RangeError(`unknown fault action ${action}`);
    return {};
  },
  clear() {
    faults.clear();
    return {};
  },
  fds() {
    const out = [];
    for (const fd of fs.readdirSync('/proc/self/fd')) {
      try {
        out.push({ fd: Number(fd), target: fs.readlinkSync(`/proc/self/fd/${fd}`) });
      } catch {
        // the directory's own descriptor, closed by now
      }
    }
    return { fds: out };
  },
  events() {
    return { events };
  },
};

async function run(command) {
  const started = now();
  try {
    const result = await ops[command.op](command);
    reply({ seq: command.seq, ok: true, started, settled: now(), ...result });
  } catch (error) {
    reply({
      seq: command.seq,
      ok: false,
      started,
      settled: now(),
      code: error?.code,
      name: error?.name,
      message: String(error?.message ?? error),
      syscall: error?.syscall,
      path: error?.path,
      committed: error?.committed,
      holder: error?.holder && { owner: error.holder.owner, token: String(error.holder.token) },
    });
  }
}

reply({ seq: 0, ok: true, ready: process.pid });
for await (const line of createInterface({ input: process.stdin })) void run(JSON.parse(line));
