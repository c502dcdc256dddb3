/**
 * `flocklease run`: hold a lease while a command runs — the lease-aware cousin of util-linux
 * flock(1). Acquire (waiting if asked), run the command with the grant in its environment, renew
 * while it runs, release when it exits, and exit with its status. On loss: SIGTERM the command,
 * SIGKILL after a grace, exit EXIT_LOST. The command runs under native/src/supervisor.c, which kills its
 * process group when `run` dies, even by SIGKILL, before the lease can pass to a waiter.
 */
import diagnostics from 'node:diagnostics_channel';
import fs from 'node:fs';
import { join, resolve } from 'node:path';
import { liveName, safeID } from '../flock/layout.js';
import { Lease } from '../flock/lease.js';
import { inspectLeaseDir } from '../flock/operator/index.js';
import { EXIT_HELD, EXIT_LOST } from '../kernel/exit.js';
import { describeEnd, EXIT_NOT_STARTED, exitStatus, Supervision } from '../kernel/supervise.js';
import { supervisorPath } from '../native.js';
import { LeaseHeldError, type LeaseError } from '../port/errors.js';
import type { LeaseHold } from '../port/hold.js';
import { compact, displayText, relative } from '../kernel/display.js';
import { isoSeconds } from './format.js';

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
  const supervision = new Supervision({
    foreground: options.foreground,
    onForward: options.verbose ? (sig, pid) => out.say(`forwarding ${sig} to the command (pid ${pid})`) : undefined,
  });
  let lost: LeaseError | undefined;

  const onLost = (reason: LeaseError): void => {
    lost = reason;
    if (!supervision.running) return;
    // The reason names the lease: 'lease "x" was lost: ...' or 'lease "x" expired before it could be renewed: ...'.
    out.say(`${reason.message}; terminating the command (SIGTERM, SIGKILL after ${compact(options.killAfterMs)})`);
    supervision.terminate(options.killAfterMs, () =>
      out.say(`the command did not exit within ${compact(options.killAfterMs)} of SIGTERM: SIGKILL`),
    );
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

  try {
    let hold: LeaseHold;
    try {
      hold = await lease.hold(id, owner, { waitMs: options.waitMs, signal: supervision.waitSignal, onLost });
    } catch (error) {
      if (supervision.interruptedStatus !== undefined) return supervision.interruptedStatus;
      if (error instanceof LeaseHeldError) {
        out.say(heldMessage(dir, id, options.waitMs, error));
        return EXIT_HELD;
      }
      throw error;
    }
    if (supervision.interruptedStatus !== undefined) {
      await hold.release().catch(() => {}); // at exit the kernel frees it anyway
      return supervision.interruptedStatus;
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
    const keepFd = descriptorOf(join(dir, liveName(safeID(id), grant.token)));
    const started = await supervision.run({ supervisor, command, env, keepFd });
    if ('notStarted' in started) {
      await hold.release().catch(() => {});
      out.say(started.notStarted);
      return EXIT_NOT_STARTED;
    }
    const { end } = started;
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
      await supervision.reap(options.killAfterMs);
      out.say(`the command ended (${describeEnd(end)}) after the lease was lost: exit ${EXIT_LOST}`);
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
    if (options.verbose) out.say(`released ${JSON.stringify(id)}; the command ended (${describeEnd(end)})`);
    return exitStatus(end);
  } finally {
    supervision.close();
    for (const stop of unsubscribe) stop();
  }
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
