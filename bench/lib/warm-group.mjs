// A group of warm Lease processes contending for one id (bench/agents/counted-contender.mjs), run
// in windows: stopped (SIGSTOP) between them, so that another group or program measured in turn
// has the CPUs to itself, and counted over IPC. Used by bench/evidence/ab-windows.mjs and
// t6-windows.mjs.
import { fork } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const CONTENDER = fileURLToPath(new URL('../agents/counted-contender.mjs', import.meta.url));
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const once = (child) => new Promise((resolve) => child.once('message', resolve));

/** `processes` contenders of the build at `root` (its dist/ and native/), in a new directory under
 * `base`; resolves once all are looping. */
export async function warmGroup(root, base, processes) {
  const dir = mkdtempSync(join(base, 'warm-group-'));
  const children = Array.from({ length: processes }, () => fork(CONTENDER, [root, dir], { stdio: 'inherit' }));
  await Promise.all(children.map(once));
  const signal = (sig) => children.forEach((child) => child.kill(sig));
  const count = async () =>
    (await Promise.all(children.map((c) => (c.send('count'), once(c))))).reduce((a, b) => a + b, 0);
  /** The CPU time (ns) all the threads of the group's processes have run. */
  const cpuNs = () => {
    let ns = 0;
    for (const { pid } of children)
      for (const tid of readdirSync(`/proc/${pid}/task`))
        ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
    return ns;
  };
  return {
    stop: () => signal('SIGSTOP'),
    /** Resumes the group and runs it `settleMs` unmeasured (its timers fire and its line forms
     * again), then for `ms`: its cycles per second and the CPU time a cycle cost (µs). It is left
     * running: the caller stops it when something else is to be measured. */
    async window(ms, settleMs) {
      signal('SIGCONT');
      await sleep(settleMs);
      const start = performance.now();
      const [before, cpuBefore] = [await count(), cpuNs()];
      await sleep(ms);
      const [after, cpuAfter] = [await count(), cpuNs()];
      return {
        rate: ((after - before) * 1000) / (performance.now() - start),
        cpuUs: (cpuAfter - cpuBefore) / 1000 / (after - before),
      };
    },
    async close() {
      signal('SIGCONT');
      children.forEach((child) => child.disconnect());
      await sleep(200);
      signal('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
