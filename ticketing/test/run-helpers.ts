/** `ticketing run` as a child process, and the heartbeat files of the loss tests. */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { CLI } from './helpers.js';

export interface Run {
  child: ChildProcess;
  stderr: () => string;
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** `ticketing run --addresses <addresses> <args…> -- sh -c <command>`; `cleanups` gets its SIGKILL. */
export function runTicketing(
  addresses: string,
  args: string[],
  command: string,
  cleanups: Array<() => Promise<void> | void>,
): Run {
  const child = spawn(process.execPath, [CLI, 'run', '--addresses', addresses, ...args, '--', 'sh', '-c', command], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  cleanups.push(() => void child.kill('SIGKILL'));
  return { child, stderr: () => stderr, exit };
}

/** A heartbeat loop: the time (ms since the epoch, from date) into `file` every 10 ms. */
export const heartbeat = (file: string, ignoreTerm: boolean): string =>
  `${ignoreTerm ? "trap '' TERM; " : ''}while :; do date +%s%3N >> ${file}; sleep 0.01; done`;

/** The heartbeats written to `file` so far. */
export function beats(file: string): number[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'latin1')
    .split('\n')
    .filter((line) => /^\d+$/.test(line))
    .map(Number);
}

/** The loss test's check: how long before the second holder's first heartbeat the first holder's
 * last one came (positive: they never overlapped). Printed with `what`, and asserted positive. */
export function heartbeatGap(first: string, second: string, what: string): number {
  const firstBeats = beats(first);
  const gap = beats(second)[0]! - firstBeats[firstBeats.length - 1]!;
  console.log(`loss test (${what}): last heartbeat of the first holder ${gap} ms before the first of the next`);
  return gap;
}
