/**
 * Running a command under a lock, for both `run` commands (`flocklease run`, `ticketing run`): the
 * signals passed on, the native supervisor spawned with `--parent-pid` (it kills the command's
 * process group when `run` dies, even by SIGKILL), termination after a loss (SIGTERM, SIGKILL after
 * a grace), and the exit codes a shell gives (126 not started, 128+n killed by signal n). What a
 * lock is, how it is taken, kept and let go, stays with each command.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import { constants } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { timerDelay } from './timers.js';

/** Signals passed on to the command. */
const FORWARDED_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2'] as const;
type ForwardedSignal = (typeof FORWARDED_SIGNALS)[number];

/** The command could not be started (the shell's code for "found but not executable"). */
export const EXIT_NOT_STARTED = 126;

/** How the supervisor (and so the command) ended. */
export interface CommandEnd {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

/** A shell's exit status for an end: the code, or 128+n for signal n. */
export function exitStatus(end: CommandEnd): number {
  return end.code ?? signalStatus(end.signal!);
}

/** `status 3`, `killed by SIGTERM`. */
export function describeEnd(end: CommandEnd): string {
  return end.code !== null ? `status ${end.code}` : `killed by ${end.signal}`;
}

function signalStatus(signal: NodeJS.Signals): number {
  return 128 + constants.signals[signal];
}

export interface SupervisionOptions {
  /** The command stays in this process group (the terminal's foreground) instead of its own:
   * signals go to it alone, and a Ctrl-C or Ctrl-\ from the terminal is not passed on twice. */
  readonly foreground?: boolean | undefined;
  /** Called for each signal passed on to the running command (a `--verbose` line). */
  readonly onForward?: ((signal: NodeJS.Signals, pid: number) => void) | undefined;
}

export interface StartOptions {
  /** The native supervisor executable (flocklease's native/src/supervisor.c). */
  readonly supervisor: string;
  readonly command: readonly string[];
  readonly env: NodeJS.ProcessEnv;
  /** A descriptor of ours the supervisor keeps open as its fd 3 until the command's group is gone. */
  readonly keepFd?: number | undefined;
}

/** How a start ended: the command's end, or an error before the supervisor ran. */
export type Started = { readonly end: CommandEnd } | { readonly notStarted: string };

/**
 * One `run`: from before the lock is asked for (a forwarded signal then stops the wait: see
 * `waitSignal` and `interruptedStatus`) until the command has ended. `close()` it in a `finally`.
 */
export class Supervision {
  readonly #options: SupervisionOptions;
  readonly #waiting = new AbortController();
  #interrupted: ForwardedSignal | undefined;
  #child: ChildProcess | undefined;
  #exited = false;
  #killTimer: NodeJS.Timeout | undefined;
  readonly #onSignal = (signal: ForwardedSignal): void => this.#forward(signal);

  constructor(options: SupervisionOptions = {}) {
    this.#options = options;
    for (const signal of FORWARDED_SIGNALS) process.on(signal, this.#onSignal);
  }

  /** Aborted by a forwarded signal that came before the command started: stop waiting for the lock. */
  get waitSignal(): AbortSignal {
    return this.#waiting.signal;
  }

  /** 128+n when signal n came before the command started (exit as that signal would have made us). */
  get interruptedStatus(): number | undefined {
    return this.#interrupted === undefined ? undefined : signalStatus(this.#interrupted);
  }

  /** Runs the command under the supervisor and resolves when the supervisor has exited. */
  async run(start: StartOptions): Promise<Started> {
    const args = ['--parent-pid', String(process.pid)];
    if (start.keepFd !== undefined) args.push('--keep-fd', '3');
    if (this.#options.foreground === true) args.push('--foreground');
    const child = spawn(start.supervisor, [...args, '--', ...start.command], {
      stdio: ['inherit', 'inherit', 'inherit', start.keepFd ?? 'ignore'],
      env: start.env,
      detached: this.#options.foreground !== true, // a new session and process group, led by the supervisor
    });
    this.#child = child;
    const status = await new Promise<CommandEnd | { error: Error }>((done) => {
      child.once('error', (error) => done({ error }));
      child.once('exit', (code, signal) => done({ code, signal }));
    });
    this.#exited = true;
    clearTimeout(this.#killTimer);
    if ('error' in status)
      return { notStarted: `cannot start the supervisor ${start.supervisor}: ${status.error.message}` };
    // The supervisor reports the command's status (126/127 if it could not be run); a signal here
    // killed the supervisor itself: what is left of the command's group goes too.
    if (status.signal !== null) await this.reap(0);
    return { end: status };
  }

  /** Whether the command is running: started and not yet ended. */
  get running(): boolean {
    return this.#child?.pid !== undefined && !this.#exited;
  }

  /** After a loss: SIGTERM the command now, SIGKILL it after `graceMs` (`onKill` says so first). */
  terminate(graceMs: number, onKill?: () => void): void {
    if (!this.running) return;
    this.#signal('SIGTERM');
    this.#killTimer = setTimeout(() => {
      onKill?.();
      this.#signal('SIGKILL');
    }, timerDelay(graceMs));
  }

  /** Waits up to `graceMs` for the command's process group to be gone, then SIGKILLs what is left. */
  async reap(graceMs: number): Promise<void> {
    const pid = this.#child?.pid;
    if (pid !== undefined && this.#options.foreground !== true) await reapGroup(pid, graceMs);
  }

  close(): void {
    for (const signal of FORWARDED_SIGNALS) process.off(signal, this.#onSignal);
    clearTimeout(this.#killTimer);
  }

  #forward(signal: ForwardedSignal): void {
    const child = this.#child;
    if (child === undefined) {
      this.#interrupted ??= signal;
      this.#waiting.abort(new Error(`interrupted by ${signal}`));
      return;
    }
    if (this.#exited || child.pid === undefined) return;
    // A Ctrl-C or Ctrl-\ from the terminal reached a --foreground command already (same process group).
    if (this.#options.foreground === true && (signal === 'SIGINT' || signal === 'SIGQUIT') && inTerminalForeground())
      return;
    this.#options.onForward?.(signal, child.pid);
    this.#signal(signal);
  }

  /** To the command's process group, or to the command alone in the foreground. */
  #signal(signal: NodeJS.Signals): void {
    const pid = this.#child?.pid;
    if (pid === undefined) return;
    try {
      process.kill(this.#options.foreground === true ? pid : -pid, signal);
    } catch {
      // already gone
    }
  }
}

/** Are we in the foreground process group of our controlling terminal? (Linux: /proc/self/stat) */
function inTerminalForeground(): boolean {
  try {
    const stat = fs.readFileSync('/proc/self/stat', 'latin1');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const [pgrp, ttyNr, tpgid] = [Number(fields[2]), Number(fields[4]), Number(fields[5])];
    return ttyNr !== 0 && tpgid === pgrp;
  } catch {
    return false;
  }
}

/** Waits up to `graceMs` for the process group to be gone, then SIGKILLs what is left of it. */
async function reapGroup(pgid: number, graceMs: number): Promise<void> {
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
