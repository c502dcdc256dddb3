// One Lease process contending for one id, kept warm: loops waiting acquire → release until its
// parent disconnects, and answers each IPC message with its cycles so far (bench/lib/warm-group.mjs).
//   node counted-contender.mjs <build root> <dir>
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [root, dir] = process.argv.slice(2);
const { Lease } = await import(pathToFileURL(join(root, 'dist', 'index.js')).href);
const lease = new Lease(dir, { ttlMs: 30_000 });
let cycles = 0;
process.on('message', () => process.send(cycles));
process.on('disconnect', () => process.exit(0));
process.send('ready');
for (;;) {
  const grant = await lease.acquire('contended', `p${process.pid}`, { waitMs: 60_000 });
  await lease.release(grant);
  cycles++;
}
