// One agent process of the demo: acquires session-1 (retrying while it is held), renews it while
// it "works", and reports each step as a JSON line. node demo-worker.mjs <dir> <name>
import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { Lease, LeaseHeldError } from '../dist/index.js';

const [dir, name] = process.argv.slice(2);
const TTL = 10_000;
const lease = new Lease(dir, { ttlMs: TTL });
const owner = `${name}@${hostname()}-${process.pid}`;
const report = (event, fields = {}) =>
  process.stdout.write(`${JSON.stringify({ event, name, pid: process.pid, at: Date.now(), ...fields })}\n`);

let grant;
let lastRefusal = '';
while (grant === undefined) {
  try {
    grant = await lease.acquire('session-1', owner);
  } catch (error) {
    if (!(error instanceof LeaseHeldError)) throw error;
    const refusal = `${error.holder.owner} holds it (token ${error.holder.token})`;
    if (refusal !== lastRefusal) report('refused', { holder: refusal });
    lastRefusal = refusal;
    await sleep(2);
  }
}
report('acquired', { token: String(grant.token) });
for (let beat = 1; ; beat++) {
  await sleep(TTL / 20);
  grant = await lease.renew(grant); // throws LeaseHeldError if someone took the lease over
  report('renewed', { token: String(grant.token), beat });
  if (beat === 6) {
    await lease.release(grant);
    report('released', { token: String(grant.token) });
    process.exit(0);
  }
}
