/** What a `run` command (`flocklease run`, `ticketing run`) does to its command's process group. */
import { setTimeout as sleep } from 'node:timers/promises';

/** Waits up to `graceMs` for the process group to be gone, then SIGKILLs what is left of it. */
export async function reapGroup(pgid: number, graceMs: number): Promise<void> {
  const deadline = performance.now() + graceMs;
  const alive = (): boolean => {
    try {
      process.kill(-pgid, 0);
      return true;
    } catch {
      return false;
    }
  };
  while (alive() && performance.now() < deadline) await sleep(20);
  if (alive()) {
    try {
      process.kill(-pgid, 'SIGKILL');
    } catch {
      // gone meanwhile
    }
  }
}
