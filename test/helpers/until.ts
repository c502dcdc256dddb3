import { setTimeout as sleep } from 'node:timers/promises';

/** Polls `condition` every 5 ms until it holds; fails after `ms`, naming `what`. */
export async function until(condition: () => boolean | Promise<boolean>, what: string, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}
