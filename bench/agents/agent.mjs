// A lock-holding process for the multi-process figures (crash takeover, wake-up), driven by JSON
// lines on stdin; each command answers JSON lines on stdout:
//   {"op":"open","impl":"lease","dir":"…","wait":true,"pollMs":100,"staleMs":2000} → {"ok":true}
//   {"op":"lock","id":"x"}   → {"ack":true,"at":…} as it calls lock(), then {"ok":true,"at":…} once held
//   {"op":"release","quietMs":20} → {"ok":true,"startedAt":…,"letGoAt":…,"at":…} once released
//                            (and `quietMs` later: the reply wakes the parent, which would compete
//                            for a CPU with the waiter this release woke)
// `at` times are sharedNow() (CLOCK_MONOTONIC, ms): comparable with the parent's and other agents'.
// `letGoAt` (the Lease only) is when its release let go: just before it closed its `.live` file,
// the close that wakes a waiter. Taken through the Lease's I/O seam, before the system call, so a
// woken waiter that takes this CPU first cannot delay it (see bench/figures/takeover.mjs).
import { createInterface } from 'node:readline';
import { fileIO } from '../../dist/flock/io.js';
import { IMPLS } from '../lib/impls.mjs';
import { sharedNow } from '../lib/stats.mjs';

const reply = (value) => process.stdout.write(`${JSON.stringify(value)}\n`);
let impl;
let release;
let letGoAt;

/** fileIO, stamping the first descriptor close of each release (its `.live` generation lock). */
const stampingIO = {
  ...fileIO,
  closeFile(fd) {
    letGoAt ??= sharedNow();
    fileIO.closeFile(fd);
  },
};

const ops = {
  open({ impl: key, dir, wait, pollMs, staleMs }) {
    impl = IMPLS[key].open(dir, { wait, pollMs, staleMs, io: key === 'lease' ? stampingIO : undefined });
    return {};
  },
  async lock({ id }) {
    reply({ ack: true, at: sharedNow() });
    release = await impl.lock(id);
    return { at: sharedNow() };
  },
  async release({ quietMs = 0 }) {
    const startedAt = sharedNow();
    letGoAt = undefined;
    await release();
    release = undefined;
    const at = sharedNow();
    if (quietMs > 0) await new Promise((resolve) => setTimeout(resolve, quietMs));
    return { startedAt, letGoAt, at };
  },
};

reply({ ok: true, ready: process.pid });
for await (const line of createInterface({ input: process.stdin })) {
  const command = JSON.parse(line);
  try {
    reply({ ok: true, ...(await ops[command.op](command)) });
  } catch (error) {
    reply({ ok: false, code: error.code, message: error.message });
  }
}
