// A contention worker: one process that competes for a few lease ids for as long as it lives,
// guarding the fenced resource with its token, and logs every outcome to its own append-only log
// (one JSON line per event, one write(2) each, written the moment the call returns — so a SIGKILL
// loses at most the event it interrupted). The checker (checker.mjs) reads these logs.
//
//   node worker.mjs '<json config>'   config: { leaseDir, logDir, resourceDir, stopFile, slot, ids,
//                                  ttlMs, transitionTimeoutMs, holdMaxMs, pauseMaxMs, mutant? }
// Stops (releases what it holds, logs `exit`, exits 0) once `stopFile` exists.
//
// `mutant` deliberately breaks the lease in this process, to prove the checker catches a broken
// lease (contention.test.ts): 'probe-lies' — the liveness probe always says the holder is dead, so
// live holders are taken over; 'clock-ahead' — odd slots run the lease on a clock 80% of a TTL fast,
// so they take leases over before they expire; 'token-regress' — odd slots read every record's
// token as 0 and run on a clock 2 s slow, so the tokens they issue go backwards.
//
// While it holds a lease it writes to the resource every few ms WITHOUT checking its expiry first
// — on purpose: a worker suspended past its expiry wakes up and writes with its old token, and the
// resource must fence it out once a successor has written. It renews every ttl/3 (one time in five
// by re-acquiring: the same-owner refresh). A renew (or re-acquire) refused with ELEASEHELD is
// logged as a loss.
import diagnostics from 'node:diagnostics_channel';
import fs from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileIO } from '../../dist/flock/io.js';
import { kIO, Lease } from '../../dist/flock/lease.js';
import { FencedResource } from './resource.mjs';

const config = JSON.parse(process.argv[2]);
const {
  leaseDir,
  logDir,
  resourceDir,
  stopFile,
  slot,
  ids,
  ttlMs,
  transitionTimeoutMs,
  holdMaxMs,
  pauseMaxMs,
  mutant,
} = config;
const pid = process.pid;
const owner = `w${slot}-${pid}`;
const logFd = fs.openSync(
  join(logDir, `w${slot}-${pid}.log`),
  fs.constants.O_WRONLY | fs.constants.O_APPEND | fs.constants.O_CREAT,
  0o600,
);
const log = (event) => fs.writeSync(logFd, `${JSON.stringify(event)}\n`);
const mutation =
  mutant === 'probe-lies'
    ? { [kIO]: { ...fileIO, probeLive: () => false } }
    : mutant === 'clock-ahead' && slot % 2 === 1
      ? { clock: () => Date.now() + 0.8 * ttlMs }
      : mutant === 'token-regress' && slot % 2 === 1
        ? {
            clock: () => Date.now() - 2_000,
            [kIO]: {
              ...fileIO,
              readRecord: (path) => {
                const bytes = fileIO.readRecord(path);
                return (
                  bytes &&
                  Buffer.from(
                    Buffer.from(bytes)
                      .toString('utf8')
                      .replace(/"token":\d+/, '"token":0'),
                  )
                );
              },
            },
          }
        : {};
const lease = new Lease(leaseDir, { ttlMs, transitionTimeoutMs, ...mutation });
const resource = new FencedResource(resourceDir);
const EXPECTED = new Set(['ELEASEHELD', 'ELEASETIMEOUT']);
const random = (lo, hi) => lo + Math.random() * (hi - lo);

// Skewed popularity: the first id is hot (constant takeovers), the last one is quiet (a holder
// suspended past its expiry often finds nobody took it: the reclaim path).
const weights = ids.map((_, i) => 1 / 4 ** i);
const totalWeight = weights.reduce((a, b) => a + b, 0);
function pickId() {
  let r = Math.random() * totalWeight;
  for (let i = 0; i < ids.length; i++) if ((r -= weights[i]) < 0) return ids[i];
  return ids[ids.length - 1];
}

let stopping = false;
const stopCheck = setInterval(() => (stopping ||= fs.existsSync(stopFile)), 20);

const stats = { busy: 0, timeouts: 0, skippedWrites: 0 };
// Grants that came by hand-off (a release gave this waiter the lease), by `${id}/${token}`.
const handedOver = new Set();
diagnostics.subscribe('flocklease:takeover', ({ grant, reason }) => {
  if (reason === 'handoff') handedOver.add(`${grant.sessionId}/${grant.token}`);
});
let seq = 0;

function unexpected(op, id, error) {
  log({ ev: 'error', op, id, code: error?.code, message: String(error?.stack ?? error), at: Date.now() });
}

const holderOf = (error) =>
  error.holder && {
    owner: error.holder.owner,
    token: String(error.holder.token),
    expiry: error.holder.expiry.getTime(),
  };

/** One write to the fenced resource with the token of `grant`. */
async function write(grant) {
  const n = ++seq;
  const result = await resource.write(grant.sessionId, grant.token, pid, n);
  if (result.skipped) {
    stats.skippedWrites++;
    return;
  }
  log({
    ev: 'write',
    id: grant.sessionId,
    token: String(grant.token),
    seq: n,
    accepted: result.accepted,
    max: result.max,
    at: result.at,
  });
}

/** Holds `grant` for a while: write, renew every ttl/3; returns the grant to release, or undefined if lost. */
async function hold(grant) {
  const until = Date.now() + random(0, holdMaxMs);
  let lastRenew = Date.now();
  const id = grant.sessionId;
  await write(grant); // present the new token to the resource at once
  for (;;) {
    await sleep(random(1, 10));
    await write(grant); // first thing after a wake-up from SIGSTOP: a possibly stale write
    if (Date.now() - lastRenew < ttlMs / 3) {
      if (stopping || Date.now() >= until) return grant;
      continue;
    }
    const begin = Date.now();
    try {
      if (Math.random() < 0.2) {
        // Sometimes extend it by re-acquiring instead: a same-owner refresh (same token) while it
        // is ours and unexpired, a takeover with a new token if it expired and nobody took it.
        const again = await lease.acquire(id, owner);
        log({
          ev: 'acquire',
          id,
          token: String(again.token),
          owner,
          expiry: again.expiry.getTime(),
          begin,
          at: Date.now(),
          refresh: true,
        });
        grant = again;
      } else {
        const renewed = await lease.renew(grant);
        log({
          ev: 'renew',
          id,
          token: String(renewed.token),
          held: String(grant.token),
          expiry: renewed.expiry.getTime(),
          begin,
          at: Date.now(),
        });
        grant = renewed;
      }
      lastRenew = Date.now();
      if (stopping || Date.now() >= until) return grant;
    } catch (error) {
      const at = Date.now();
      if (error?.code === 'ELEASEHELD') {
        log({ ev: 'loss', id, token: String(grant.token), holder: holderOf(error) ?? null, begin, at });
        return undefined;
      }
      if (error?.code === 'ELEASETIMEOUT') {
        stats.timeouts++;
        log({ ev: 'renew-failed', id, token: String(grant.token), code: error.code, begin, at });
      } else unexpected('renew', id, error);
      if (stopping || Date.now() >= until) return grant;
    }
  }
}

async function release(grant) {
  const begin = Date.now();
  // Logged before the call: a kill after the release committed (a hand-off's waiter may already
  // hold the lease) but before the `release` line would otherwise leave this holder unended.
  log({ ev: 'releasing', id: grant.sessionId, token: String(grant.token), begin, at: begin });
  try {
    await lease.release(grant);
    log({ ev: 'release', id: grant.sessionId, token: String(grant.token), begin, at: Date.now() });
  } catch (error) {
    // Timed out (a suspended process holds the transition lock): we stop using the lease here; the
    // library still holds the generation until it expires or this process acquires the id again.
    log({
      ev: 'release-failed',
      id: grant.sessionId,
      token: String(grant.token),
      code: error?.code,
      begin,
      at: Date.now(),
    });
    if (!EXPECTED.has(error?.code)) unexpected('release', grant.sessionId, error);
  }
}

log({ ev: 'start', pid, owner, slot, mutant, at: Date.now() });
stopping = fs.existsSync(stopFile);
let lastStats = Date.now();
while (!stopping) {
  const id = pickId();
  const begin = Date.now();
  let grant;
  try {
    // Half the acquires wait in line (up to two TTLs), so hand-offs between processes — a release
    // renaming the front waiter's .wait file to the new .live — happen under the same kills and stops.
    const waitMs = Math.random() < 0.5 ? 0 : random(1, 2 * ttlMs);
    grant = await lease.acquire(id, owner, { waitMs });
    const handoff = handedOver.delete(`${id}/${grant.token}`);
    log({
      ev: 'acquire',
      id,
      token: String(grant.token),
      owner,
      expiry: grant.expiry.getTime(),
      begin,
      at: Date.now(),
      waited: waitMs > 0,
      handoff,
    });
  } catch (error) {
    if (error?.code === 'ELEASEHELD') stats.busy++;
    else if (error?.code === 'ELEASETIMEOUT') stats.timeouts++;
    else unexpected('acquire', id, error);
  }
  if (grant !== undefined) {
    const toRelease = await hold(grant);
    if (toRelease !== undefined) await release(toRelease);
  }
  if (Date.now() - lastStats > 2_000) {
    log({ ev: 'stats', ...stats, at: Date.now() });
    lastStats = Date.now();
  }
  await sleep(random(1, pauseMaxMs));
}
log({ ev: 'stats', ...stats, at: Date.now() });
clearInterval(stopCheck);
log({ ev: 'exit', at: Date.now() });
process.exit(0);
