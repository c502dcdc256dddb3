/**
 * `flocklease run`: hold a lease while a command runs — the lease-aware cousin of util-linux
 * flock(1). Acquire (waiting if asked), run the command with the grant in its environment, renew
 * while it runs, release when it exits, and exit with its status. On loss: SIGTERM the command,
 * SIGKILL after a grace, exit EXIT_LOST. The command runs under native/src/supervisor.c, which kills its
 * process group when `run` dies, even by SIGKILL, before the lease can pass to a waiter.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import diagnostics from 'node:diagnostics_channel';
import fs from 'node:fs';
import { constants } from 'node:os';
import { join, resolve } from 'node:path';
import { liveName, safeID } from '../flock/layout.js';
import { Lease } from '../flock/lease.js';
import { inspectLeaseDir } from '../flock/operator/index.js';
import { EXIT_HELD, EXIT_LOST } from '../kernel/exit.js';
import { timerDelay } from '../kernel/timers.js';
import { reapGroup } from '../kernel/process-group.js';
import { supervisorPath } from '../native.js';
import { LeaseHeldError, type LeaseError } from '../port/errors.js';
import type { LeaseHold } from '../port/hold.js';
import { compact, displayText, relative } from '../kernel/display.js';
import { isoSeconds } from './format.js';

export { EXIT_HELD, EXIT_LOST } from '../kernel/exit.js';
/** Signals passed on to the command. */
const FORWARDED_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2'] as const;
type Forwarded = (typeof FORWARDED_SIGNALS)[number];

export interface RunOptions {
  readonly dir: string;
  readonly id: string;
  readonly owner: string;
  readonly ttlMs: number;
  /** 0: fail at once when held; Infinity: wait until a signal. */
  readonly waitMs: number;
  /** After a loss, how long the command has between SIGTERM and SIGKILL. */
  readonly killAfterMs: number;
  /** Run the command in this process group (the terminal's foreground) instead of its own. */
  readonly foreground: boolean;
  readonly verbose: boolean;
  readonly command: readonly string[];
}

export interface Output {
  /** One line to stderr, prefixed with `flocklease: `. */
  say(line: string): void;
}

export async function runCommand(options: RunOptions, out: Output): Promise<number> {
  const { id, owner, command } = options;
  const dir = resolve(options.dir);
  const supervisor = supervisorPath(); // missing: fail before taking the lease
  const lease = new Lease(dir, { ttlMs: options.ttlMs });
  const waiting = new AbortController();
  let interrupted: Forwarded | undefined;
  let child: ChildProcess | undefined;
  let exited = false;
  let lost: LeaseError | undefined;
  let killTimer: NodeJS.Timeout | undefined;

  const target = (): number => (options.foreground ? child!.pid! : -child!.pid!); // its process group unless --foreground
  const signal = (sig: NodeJS.Signals): void => {
    try {
      process.kill(target(), sig);
    } catch {
      // already gone
    }
  };
  const onSignal = (sig: Forwarded): void => {
    if (child === undefined) {
      // Still waiting for the lease: stop waiting, exit as that signal would have made us.
      interrupted ??= sig;
      waiting.abort(new Error(`interrupted by ${sig}`));
      return;
    }
    if (exited || child.pid === undefined) return;
    // A Ctrl-C or Ctrl-\ from the terminal reached a --foreground command already (same process group).
    if (options.foreground && (sig === 'SIGINT' || sig === 'SIGQUIT') && inTerminalForeground()) return;
    if (options.verbose) out.say(`forwarding ${sig} to the command (pid ${child.pid})`);
    signal(sig);
  };
  const onLost = (reason: LeaseError): void => {
    lost = reason;
    if (child === undefined || exited || child.pid === undefined) return;
    // The reason names the lease: 'lease "x" was lost: ...' or 'lease "x" expired before it could be renewed: ...'.
    out.say(`${reason.message}; terminating the command (SIGTERM, SIGKILL after ${compact(options.killAfterMs)})`);
    signal('SIGTERM');
    killTimer = setTimeout(() => {
      out.say(`the command did not exit within ${compact(options.killAfterMs)} of SIGTERM: SIGKILL`);
      signal('SIGKILL');
    }, timerDelay(options.killAfterMs));
  };
  const verbose = (channel: string, text: (message: { grant: { token: bigint; expiry: Date } }) => string) => {
    const listener = (message: unknown): void => {
      const m = message as { grant: { sessionId: string; token: bigint; expiry: Date } };
      if (m.grant.sessionId === id) out.say(text(m));
    };
    diagnostics.subscribe(channel, listener);
    return () => diagnostics.unsubscribe(channel, listener);
  };
  const unsubscribe = options.verbose
    ? [
        verbose('flocklease:renew', (m) => `renewed ${JSON.stringify(id)} until ${isoSeconds(m.grant.expiry)}`),
        verbose(
          'flocklease:reclaim',
          (m) => `reclaimed ${JSON.stringify(id)} after its expiry, until ${isoSeconds(m.grant.expiry)}`,
        ),
      ]
    : [];

  for (const sig of FORWARDED_SIGNALS) process.on(sig, onSignal);
  try {
    let hold: LeaseHold;
    try {
      hold = await lease.hold(id, owner, { waitMs: options.waitMs, signal: waiting.signal, onLost });
    } catch (error) {
      if (interrupted !== undefined) return 128 + constants.signals[interrupted];
      if (error instanceof LeaseHeldError) {
        out.say(heldMessage(dir, id, options.waitMs, error));
        return EXIT_HELD;
      }
      throw error;
    }
    if (interrupted !== undefined) {
      await hold.release().catch(() => {}); // at exit the kernel frees it anyway
      return 128 + constants.signals[interrupted];
    }
    if (lost !== undefined) {
      out.say(`${lost.message}; the command was not started`);
      return EXIT_LOST;
    }
    const { grant } = hold;
    if (options.verbose)
      out.say(`acquired ${JSON.stringify(id)} as ${owner}: token ${grant.token}, expires ${isoSeconds(grant.expiry)}`);

    const env = {
      ...process.env,
      FLOCKLEASE_DIR: dir,
      FLOCKLEASE_SESSION: id,
      FLOCKLEASE_OWNER: owner,
      FLOCKLEASE_TOKEN: String(grant.token),
      FLOCKLEASE_EXPIRY: grant.expiry.toISOString(),
      FLOCKLEASE_TTL_MS: String(options.ttlMs),
    };
    // The supervisor keeps a descriptor of the generation's .live open (its fd 3): the lease stays
    // held until it has killed the command's group, even if this process is SIGKILLed.
    const liveFd = descriptorOf(join(dir, liveName(safeID(id), grant.token)));
    const supervisorArgs = ['--parent-pid', String(process.pid), ...(liveFd === undefined ? [] : ['--keep-fd', '3'])];
    if (options.foreground) supervisorArgs.push('--foreground');
    const started = spawn(supervisor, [...supervisorArgs, '--', ...command], {
      stdio: ['inherit', 'inherit', 'inherit', liveFd ?? 'ignore'],
      env,
      detached: !options.foreground, // a new session and process group, led by the supervisor
    });
    child = started;
    const status = await new Promise<
      { code: number | null; signal: NodeJS.Signals | null } | { error: NodeJS.ErrnoException }
    >((done) => {
      started.once('error', (error) => done({ error }));
      started.once('exit', (code, signal) => done({ code, signal }));
    });
    exited = true;
    clearTimeout(killTimer);

    if ('error' in status) {
      await hold.release().catch(() => {});
      out.say(`cannot start the supervisor ${supervisor}: ${status.error.message}`);
      return 126;
    }
    // The supervisor reports the command's status (126/127 if it could not be run); a signal here
    // killed the supervisor itself: what is left of the command's group goes too.
    if (status.signal !== null && !options.foreground) await reapGroup(started.pid!, 0);
    const childStatus = status.code ?? 128 + constants.signals[status.signal!];
    if (lost === undefined) {
      // Was the lease still ours when the command ended? A renew tells: a takeover or a
      // force-release since the last renew shows up here, not after we reported success.
      try {
        await lease.renew(hold.grant);
      } catch (error) {
        if (error instanceof LeaseHeldError) lost = error;
        else out.say(`warning: could not confirm the lease at the command's end: ${(error as Error).message}`);
      }
    }
    if (lost !== undefined) {
      if (!options.foreground) await reapGroup(started.pid!, options.killAfterMs);
      out.say(`the command ended (${describeStatus(status)}) after the lease was lost: exit ${EXIT_LOST}`);
      return EXIT_LOST;
    }
    try {
      await hold.release();
    } catch (error) {
      // The kernel drops our liveness lock when we exit: the next acquire takes over at once.
      out.say(
        `warning: could not release ${JSON.stringify(id)} (${(error as Error).message}); it is freed when this process exits`,
      );
    }
    if (options.verbose) out.say(`released ${JSON.stringify(id)}; the command ended (${describeStatus(status)})`);
    return childStatus;
  } finally {
    for (const sig of FORWARDED_SIGNALS) process.off(sig, onSignal);
    for (const stop of unsubscribe) stop();
  }
}

function describeStatus(status: { code: number | null; signal: NodeJS.Signals | null }): string {
  return status.code !== null ? `status ${status.code}` : `killed by ${status.signal}`;
}

/** One line naming the holder: owner, pid, token, expiry. */
function heldMessage(dir: string, id: string, waitMs: number, error: LeaseHeldError): string {
  const prefix =
    waitMs > 0
      ? `lease ${JSON.stringify(id)} not obtained within ${compact(waitMs)}:`
      : `lease ${JSON.stringify(id)} is`;
  let row;
  try {
    row = inspectLeaseDir(dir, { id }).leases[0];
  } catch {
    row = undefined;
  }
  const holder =
    error.holder ?? (row?.owner ? { owner: row.owner, token: row.token!, expiry: row.expiry! } : undefined);
  if (holder === undefined)
    return `lease ${JSON.stringify(id)} not obtained${waitMs > 0 ? ` within ${compact(waitMs)}` : ''}: ${error.message}`;
  const pid = row?.token === holder.token && row.pid !== undefined ? `pid ${row.pid}, ` : '';
  const now = Date.now();
  return `${prefix} held by ${displayText(holder.owner)} (${pid}token ${holder.token}, expires ${isoSeconds(holder.expiry)}, ${relative(holder.expiry.getTime(), now)})`;
}

/** Our descriptor of `path` (the Lease keeps the .live open; matched by device and inode). */
function descriptorOf(path: string): number | undefined {
  let target: fs.Stats;
  try {
    target = fs.statSync(path);
  } catch {
    return undefined;
  }
  for (const name of fs.readdirSync('/proc/self/fd')) {
    try {
      const st = fs.fstatSync(Number(name));
      if (st.dev === target.dev && st.ino === target.ino) return Number(name);
    } catch {
      // the directory's own descriptor, closed since the listing
    }
  }
  return undefined;
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
