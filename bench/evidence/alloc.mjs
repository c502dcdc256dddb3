// What a contended cycle allocates: N processes loop waiting acquire → release on one id (the
// contention figure's loop), the Lease's and then the protocol floor's (bench/evidence/
// protocol-floor.mjs: the Lease's own calls, none of its logic). After the warm-up, V8's sampling
// heap profiler runs in each process over the measured window, counting objects a scavenge or a
// full GC has already collected too (that is what a cycle allocates, not what it keeps). Printed:
// the bytes allocated per cycle, all processes together, and for the Lease the allocation sites
// by bytes per cycle: the JavaScript function on top of the stack (a function V8 inlined counts as
// its caller). The profiler slows the processes, so their cycles/s are not the figure's; bytes per
// cycle are. Imports the built package (dist/).
//
//   node bench/evidence/alloc.mjs [dir=/dev/shm] [seconds=3] [processes=8] [warm-up s=10] [sites=25]
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { nodeJson } from '../lib/child.mjs';

const here = fileURLToPath(new URL('.', import.meta.url));
const [base = '/dev/shm', seconds = '3', processes = '8', warmup = '10', siteCount = '25'] = process.argv.slice(2);

// The sampler each process loads first: sampling from the warm-up's end; at exit its profile goes
// to the file named by FLOCKLEASE_ALLOC_OUT (the in-process session answers synchronously).
const sampler = `data:text/javascript,${encodeURIComponent(`
  import { Session } from 'node:inspector';
  import { writeFileSync } from 'node:fs';
  const session = new Session();
  session.connect();
  setTimeout(() => {
    session.post('HeapProfiler.enable');
    session.post('HeapProfiler.startSampling', {
      samplingInterval: 1024, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true,
    });
    process.on('exit', () => session.post('HeapProfiler.stopSampling', (error, result) => {
      writeFileSync(process.env.FLOCKLEASE_ALLOC_OUT, JSON.stringify(error ?? result.profile));
    }));
  }, ${Number(warmup) * 1000}).unref();
`)}`;

/** Runs one contending process with the sampler: its cycles in the window and its profile. */
async function contender(args, out) {
  const env = { ...process.env, FLOCKLEASE_ALLOC_OUT: out };
  const { cycles } = await nodeJson(['--import', sampler, ...args], { env });
  const profile = JSON.parse(readFileSync(out, 'utf8'));
  if (profile.head === undefined) throw new Error(`sampling failed: ${JSON.stringify(profile)}`);
  return { cycles, profile };
}

/** Bytes per allocation site (function, file:line) summed over a profile's tree. */
function bySite(profile, into) {
  const walk = (node) => {
    const { functionName, url, lineNumber } = node.callFrame;
    const site = `${functionName || '(anonymous)'} ${url.split('/').slice(-2).join('/')}:${lineNumber + 1}`;
    into.set(site, (into.get(site) ?? 0) + node.selfSize);
    for (const child of node.children) walk(child);
  };
  walk(profile.head);
  return into;
}

const systems = {
  Lease: (dir) => [join(here, 'contention-cpu.mjs'), dir, '1', seconds, processes, warmup, 'lease'],
  'protocol floor': (dir) => [join(here, 'protocol-floor.mjs'), '--child', dir, 'contend', warmup, seconds],
};
for (const [name, args] of Object.entries(systems)) {
  const dir = mkdtempSync(join(base, 'alloc-'));
  try {
    const runs = await Promise.all(
      Array.from({ length: Number(processes) }, (_, i) => contender(args(dir), join(dir, `profile-${i}.json`))),
    );
    const cycles = runs.reduce((sum, run) => sum + run.cycles, 0);
    const sites = new Map();
    for (const run of runs) bySite(run.profile, sites);
    const total = [...sites.values()].reduce((sum, bytes) => sum + bytes, 0);
    console.log(`${name}: ${(total / cycles / 1024).toFixed(1)} KiB allocated per cycle (${cycles} cycles)`);
    if (name !== 'Lease') continue;
    for (const [site, bytes] of [...sites].sort((a, b) => b[1] - a[1]).slice(0, Number(siteCount))) {
      console.log(`  ${String(Math.round(bytes / cycles)).padStart(6)} B  ${site}`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
