// Runs the built `flocklease` bin (dist/cli/main.js; `npm test` builds first) as a real process.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { afterEach } from 'vitest';

export const BIN = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));

export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** A running `flocklease` process. */
export class CliProcess {
  readonly child: ChildProcess;
  stdout = '';
  stderr = '';
  readonly done: Promise<CliResult>;
  readonly #listeners = new Set<() => void>();

  constructor(args: readonly string[], env: NodeJS.ProcessEnv = {}) {
    this.child = spawn(process.execPath, [BIN, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...env },
    });
    this.child.stdout!.on('data', (chunk: Buffer) => {
      this.stdout += chunk.toString();
      for (const wake of this.#listeners) wake();
    });
    this.child.stderr!.on('data', (chunk: Buffer) => {
      this.stderr += chunk.toString();
      for (const wake of this.#listeners) wake();
    });
    const exited = once(this.child, 'close') as Promise<[number | null, NodeJS.Signals | null]>;
    this.done = exited.then(([code, signal]) => ({ code, signal, stdout: this.stdout, stderr: this.stderr }));
    running.add(this);
    void this.done.finally(() => running.delete(this));
  }

  get pid(): number {
    return this.child.pid!;
  }

  /** Resolves once stdout or stderr matches `pattern` (rejects if the process ends first). */
  async output(pattern: RegExp, timeoutMs = 20_000): Promise<RegExpMatchArray> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const match = this.stdout.match(pattern) ?? this.stderr.match(pattern);
      if (match) return match;
      if (this.child.exitCode !== null || this.child.signalCode !== null) {
        throw new Error(`flocklease exited before printing ${pattern}: stdout=${this.stdout} stderr=${this.stderr}`);
      }
      if (Date.now() > deadline)
        throw new Error(`timed out waiting for ${pattern}: stdout=${this.stdout} stderr=${this.stderr}`);
      await new Promise<void>((resolve) => {
        const wake = (): void => {
          this.#listeners.delete(wake);
          resolve();
        };
        this.#listeners.add(wake);
        setTimeout(wake, 50);
      });
    }
  }

  kill(signal: NodeJS.Signals): void {
    this.child.kill(signal);
  }
}

const running = new Set<CliProcess>();
afterEach(() => {
  for (const p of running) p.child.kill('SIGKILL');
  running.clear();
});

/** Runs `flocklease ...args` to completion. */
export function cli(args: readonly string[], env?: NodeJS.ProcessEnv): Promise<CliResult> {
  return new CliProcess(args, env).done;
}

/** Polls `check` until it returns a value other than undefined. */
export async function until<T>(
  check: () => T | undefined | Promise<T | undefined>,
  what: string,
  timeoutMs = 20_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
