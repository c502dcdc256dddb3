// A lock-holding process for the crash-takeover figure, driven by JSON lines on stdin; each
// command answers JSON lines on stdout:
//   {"op":"open","impl":"lease","dir":"…","wait":true,"pollMs":100,"staleMs":2000} → {"ok":true}
//   {"op":"lock","id":"x"}   → {"ack":true,"at":…} as it calls lock(), then {"ok":true,"at":…} once held
//   {"op":"release"}         → {"ok":true} once released
// `at` times are sharedNow() (CLOCK_MONOTONIC, ms): comparable with the parent's and other agents'.
import { createInterface } from 'node:readline';
import { IMPLS } from '../lib/impls.mjs';
import { sharedNow } from '../lib/stats.mjs';

const reply = (value) => process.stdout.write(`${JSON.stringify(value)}\n`);
let impl;
let release;

const ops = {
  open({ impl: key, dir, wait, pollMs, staleMs }) {
    impl = IMPLS[key].open(dir, { wait, pollMs, staleMs });
    return {};
  },
  async lock({ id }) {
    reply({ ack: true, at: sharedNow() });
    release = await impl.lock(id);
    return { at: sharedNow() };
  },
  async release() {
    await release();
    release = undefined;
    return {};
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
