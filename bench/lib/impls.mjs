// The implementations compared, behind one small interface so every figure drives them alike:
//
//   const impl = IMPLS[key].open(dir, { wait, pollMs, staleMs, io, splitTurn })
//   const release = await impl.lock(id)      // acquire (waiting if `wait`); resolves when held
//   await release()                          // and let it go
//
// `wait` makes lock() wait for a holder instead of failing: flocklease's waiting acquire (woken by
// the kernel), proper-lockfile's `retries` (a poll every `pollMs`), lockfile's `wait` +
// `pollPeriod`. `staleMs` is the peers' staleness threshold (how they detect a crashed holder);
// flocklease needs none (the kernel drops a dead holder's flock). `io` (the Lease and the Node
// floor) replaces the lease's I/O layer, `splitTurn` (the Node floor) lets the loop turn before
// each commit, as the Lease does for an operation that begins a run: the event-loop figure's.
import { mkdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { kIO } from '../../dist/flock/lease.js';
import { Lease, MemoryLease } from '../../dist/index.js';
import { nodeFloor, nodeFloorTakeover } from './node-floor.mjs';

const require = createRequire(import.meta.url);
const properLockfile = require('proper-lockfile');
const lockfile = require('lockfile');
const lockfileLock = promisify(lockfile.lock);
const lockfileUnlock = promisify(lockfile.unlock);

/** How long a waiting lock() may wait before it fails (far longer than any figure needs). */
const WAIT_LIMIT_MS = 60_000;
/** proper-lockfile's smallest `stale` (lib/lockfile.js: `Math.max(options.stale || 0, 2000)`). */
export const PROPER_LOCKFILE_MIN_STALE_MS = 2_000;
/** The peers' poll period while they wait (lockfile's default `pollPeriod`). */
export const DEFAULT_POLL_MS = 100;

const owner = `bench-${process.pid}`;

export const IMPLS = {
  lease: {
    label: 'flocklease Lease',
    short: 'Lease',
    open(dir, { wait = false, io } = {}) {
      const lease = new Lease(dir, io ? { [kIO]: io } : undefined); // durable (the default): fsync of the record and the directory
      return {
        lease,
        async lock(id, { wait: waitNow = wait } = {}) {
          const grant = await lease.acquire(id, owner, waitNow ? { waitMs: WAIT_LIMIT_MS } : undefined);
          return () => lease.release(grant);
        },
      };
    },
  },
  'node-floor': {
    label: "Node floor: the C floor's calls through the addon, durable",
    short: 'Node floor',
    open: (dir, { io, splitTurn } = {}) => nodeFloor(dir, { io, splitTurn }),
  },
  'node-floor-takeover': {
    label: "Node floor: a takeover's calls through the addon and its watch, durable",
    short: 'Node floor',
    open: (dir, { wait } = {}) => nodeFloorTakeover(dir, { wait }),
  },
  memory: {
    label: 'flocklease MemoryLease',
    short: 'MemoryLease',
    inProcessOnly: true,
    open(dir, { wait = false } = {}) {
      const lease = new MemoryLease();
      return {
        lease,
        async lock(id, { wait: waitNow = wait } = {}) {
          const grant = await lease.acquire(id, owner, waitNow ? { waitMs: WAIT_LIMIT_MS } : undefined);
          return () => lease.release(grant);
        },
      };
    },
  },
  'proper-lockfile': {
    label: 'proper-lockfile (default options)',
    short: 'proper-lockfile',
    open: (dir, options) => openProperLockfile(dir, options, {}),
  },
  'proper-lockfile-norealpath': {
    label: 'proper-lockfile (realpath: false)',
    short: 'proper-lockfile rp:false',
    open: (dir, options) => openProperLockfile(dir, options, { realpath: false }),
  },
  lockfile: {
    label: 'lockfile (npm)',
    short: 'lockfile',
    open(dir, { wait = false, pollMs = DEFAULT_POLL_MS, staleMs } = {}) {
      mkdirSync(dir, { recursive: true });
      return {
        async lock(id, { wait: waitNow = wait } = {}) {
          const path = join(dir, `${id}.lock`);
          // lockfile mutates its options object: a fresh one per call.
          const options = {};
          if (staleMs !== undefined) options.stale = staleMs;
          if (waitNow) Object.assign(options, { wait: WAIT_LIMIT_MS, pollPeriod: pollMs });
          await lockfileLock(path, options);
          return () => lockfileUnlock(path);
        },
      };
    },
  },
};

function openProperLockfile(dir, { wait = false, pollMs = DEFAULT_POLL_MS, staleMs } = {}, base) {
  mkdirSync(dir, { recursive: true });
  const made = new Set();
  return {
    async lock(id, { wait: waitNow = wait } = {}) {
      const file = join(dir, id);
      // With realpath (the default) the locked file must exist: create it once, outside any timing
      // that matters (the first, warm-up, use of an id).
      if (!made.has(file)) {
        writeFileSync(file, '');
        made.add(file);
      }
      const options = { ...base };
      if (staleMs !== undefined) options.stale = staleMs;
      if (waitNow) {
        // Poll every pollMs until WAIT_LIMIT_MS (retry's factor 1: a constant period).
        options.retries = {
          retries: Math.ceil(WAIT_LIMIT_MS / pollMs),
          factor: 1,
          minTimeout: pollMs,
          maxTimeout: pollMs,
        };
      }
      return properLockfile.lock(file, options);
    },
  };
}

/** The keys of the implementations that run in the cycle table, in table order. */
export const CYCLE_IMPLS = [
  'node-floor',
  'lease',
  'memory',
  'proper-lockfile',
  'proper-lockfile-norealpath',
  'lockfile',
];
/** The implementations that work across processes (crash takeover, wake-up, contention). */
export const CROSS_PROCESS_IMPLS = ['lease', 'proper-lockfile', 'lockfile'];
