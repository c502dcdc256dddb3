import { setTimeout as sleep } from 'node:timers/promises';

/** Polls `condition` every 5 ms until it holds; fails after `ms`, naming `what`. The one `until` of
 * both packages' tests (test/cli/cli.ts's returns a value, and polls slower for child processes). */
export async function until(
  condition: () => boolean | Promise<boolean>,
  what = 'the condition',
  ms = 5_000,
): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}
