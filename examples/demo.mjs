// flocklease demo: two agent processes want the same session. One gets it; we SIGKILL it
// mid-work (no release, no cleanup); the other takes over at once — not after the 10 s TTL.
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

// A directory given on the command line is kept (to inspect it); the demo's own temp dir is removed.
const ownDir = process.argv[2] === undefined;
const dir = process.argv[2] ?? mkdtempSync(join(tmpdir(), 'flocklease-demo-'));
process.on('exit', () => {
  if (ownDir) rmSync(dir, { recursive: true, force: true });
});
process.once('SIGINT', () => process.exit(130)); // Ctrl-C: still through the 'exit' cleanup
const start = Date.now();
const stamp = (at = Date.now()) => `[${String(at - start).padStart(5)} ms]`;
const say = (text, at) => console.log(`${stamp(at)} ${text}`);
const workers = new Map();
let killedAt;
let killed; // the name of the worker killed: whichever acquired first

function startWorker(name) {
  const child = spawn(process.execPath, [new URL('./demo-worker.mjs', import.meta.url).pathname, dir, name], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  workers.set(name, child);
  createInterface({ input: child.stdout }).on('line', (line) => {
    const e = JSON.parse(line);
    const who = `${e.name} (pid ${e.pid})`;
    if (e.event === 'refused') say(`${who} refused: ${e.holder}`, e.at);
    if (e.event === 'renewed') say(`${who} renewed, token ${e.token} unchanged`, e.at);
    if (e.event === 'released') say(`${who} released the lease and exits`, e.at);
    if (e.event === 'acquired') {
      say(`${who} ACQUIRED session-1 with fencing token ${e.token}`, e.at);
      if (killedAt !== undefined) {
        say(
          `   → takeover ${e.at - killedAt} ms after the kill (TTL is 10 000 ms: the kernel dropped the dead holder's flock)`,
          e.at,
        );
      } else {
        setTimeout(() => kill(name, child), 1_800);
      }
    }
  });
  return child;
}

function kill(name, child) {
  killed = name;
  killedAt = Date.now();
  say(`demo: kill -9 ${name} (pid ${child.pid}) while it holds the lease`);
  child.kill('SIGKILL');
}

console.log(`lease dir ${dir}, TTL 10 s`);
startWorker('agent-A');
setTimeout(() => startWorker('agent-B'), 300);

// The survivor is the worker that was not killed (agent-A is started first, but either may win).
const survivor = await new Promise((resolve) => {
  const poll = setInterval(() => {
    for (const [name, child] of workers) {
      if (killed === undefined || name === killed || child.exitCode === null) continue;
      clearInterval(poll);
      resolve({ name, child });
    }
  }, 50);
});
console.log(`\nfiles left in ${dir}:`);
for (const name of readdirSync(dir).sort()) {
  const text = name.endsWith('.json') ? `  ${readFileSync(join(dir, name), 'utf8')}` : '';
  console.log(`  ${name}${text}`);
}
console.log(
  `(a released lease leaves a tombstone: owner "", the last token; ${survivor.name} exited ${survivor.child.exitCode})`,
);
if (ownDir) console.log(`(removed ${dir}; pass a directory to keep the files)`);
