/**
 * `ticketing run`: run a command on one host of many. Hold the key (waiting up to --wait), run the
 * command with `TICKETING_KEY`/`TICKETING_TOKEN`, keep the lock alive while it runs, release when
 * it exits, and exit with its status. On loss the command's process group gets SIGTERM, then
 * SIGKILL after the grace, both before the local deadline (the grace is taken out of it). The
 * command runs under flocklease's supervisor (`flocklease run`'s), which kills the group when
 * `run` dies, even by SIGKILL. Exit codes as `flocklease run`'s (docs/cli.md "Exit codes").
 */
import { spawn } from 'node:child_process';
import { constants } from 'node:os';
import type { ConnectionOptions } from 'node:tls';
import { EXIT_HELD, EXIT_LOST, reapGroup, timerDelay } from '#kernel';
import { TicketClient } from './client.js';
import type { TicketHold } from './client/hold.js';
import { LockLostError, NotAcquiredError } from './errors.js';

export interface RunOptions {
  readonly addresses: readonly string[];
  readonly key: string;
  readonly secret: string | undefined;
  /** TLS to the servers (Node's `tls.connect` options); undefined: plain TCP. */
  readonly tls?: ConnectionOptions | undefined;
  readonly waitMs: number;
  /** Hold one of N permits (the command gets `TICKETING_SLOT`), or a shared hold. */
  readonly permits?: number | undefined;
  readonly shared?: boolean | undefined;
  /** Between SIGTERM and SIGKILL after a loss, ms; undefined: a tenth of the lease. */
  readonly killAfterMs: number | undefined;
  readonly command: readonly string[];
}

/** Signals passed on to the command (as `flocklease run` does). */
const FORWARDED_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2'] as const;
type Forwarded = (typeof FORWARDED_SIGNALS)[number];
/** The grace as a share of the lease when --kill-after is not given. */
const GRACE_FRACTION = 0.1;

/**
 * flocklease's supervisor. It is flocklease's native executable, so `ticketing run` needs the
 * flocklease package installed beside it (in this repository, the package this one lives in).
 */
async function supervisorPath(): Promise<string> {
  const name = 'flocklease';
  let flocklease: { supervisorPath(): string };
  try {
    flocklease = (await import(name)) as typeof flocklease;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ERR_MODULE_NOT_FOUND') throw error;
    try {
      flocklease = (await import(new URL('../../dist/index.js', import.meta.url).href)) as typeof flocklease;
    } catch {
      throw new Error('ticketing run needs the flocklease package (its supervisor): npm i flocklease', {
        cause: error,
      });
    }
  }
  return flocklease.supervisorPath();
}

export async function runCommand(options: RunOptions, say: (line: string) => void): Promise<number> {
  const supervisor = await supervisorPath(); // missing: fail before taking the lock
  const client = new TicketClient({ addresses: options.addresses, secret: options.secret, tls: options.tls });
  const waiting = new AbortController();
  let interrupted: Forwarded | undefined;
  let pgid: number | undefined;
  let exited = false;
  /** Close without waiting for what is in flight (after a loss). */
  let abandon = false;
  const signalGroup = (sig: NodeJS.Signals): void => {
    try {
      if (pgid !== undefined) process.kill(-pgid, sig);
    } catch {
      // already gone
    }
  };
  const onSignal = (sig: Forwarded): void => {
    if (pgid === undefined) {
      interrupted ??= sig;
      waiting.abort(new Error(`interrupted by ${sig}`));
    } else if (!exited) signalGroup(sig);
  };
  for (const sig of FORWARDED_SIGNALS) process.on(sig, onSignal);
  try {
    let hold: TicketHold;
    try {
      hold = await client.hold(options.key, {
        waitMs: options.waitMs,
        permits: options.permits,
        shared: options.shared,
        signal: waiting.signal,
        margin:
          options.killAfterMs === undefined
            ? { fraction: 0.01 + GRACE_FRACTION }
            : { fraction: 0.01, ms: 50 + options.killAfterMs },
      });
    } catch (error) {
      if (interrupted !== undefined) return 128 + constants.signals[interrupted];
      if (error instanceof NotAcquiredError && error.status === 'timed-out') {
        say(
          `key ${JSON.stringify(options.key)} ${options.waitMs > 0 ? `not obtained within ${options.waitMs} ms: it is` : 'is'} held by another owner`,
        );
        return EXIT_HELD;
      }
      throw error;
    }
    const graceMs = options.killAfterMs ?? hold.leaseMs * GRACE_FRACTION;
    const child = spawn(supervisor, ['--parent-pid', String(process.pid), '--', ...options.command], {
      stdio: 'inherit',
      env: {
        ...process.env,
        TICKETING_KEY: options.key,
        TICKETING_TOKEN: String(hold.token),
        ...(hold.slot === undefined ? {} : { TICKETING_SLOT: String(hold.slot) }),
      },
      detached: true, // a new session and process group, led by the supervisor
    });
    pgid = child.pid;
    let lost: unknown;
    let killTimer: NodeJS.Timeout | undefined;
    const onLost = (): void => {
      if (!(hold.signal.reason instanceof Error) || hold.signal.reason.name === 'AbortError') return; // released
      lost = hold.signal.reason;
      if (exited) return;
      say(`${(lost as Error).message}; terminating the command (SIGTERM, SIGKILL after ${Math.round(graceMs)} ms)`);
      signalGroup('SIGTERM');
      killTimer = setTimeout(() => signalGroup('SIGKILL'), timerDelay(graceMs));
    };
    hold.signal.addEventListener('abort', onLost, { once: true });
    const status = await new Promise<
      { code: number | null; signal: NodeJS.Signals | null } | { error: NodeJS.ErrnoException }
    >((done) => {
      child.once('error', (error) => done({ error }));
      child.once('exit', (code, signal) => done({ code, signal }));
    });
    exited = true;
    clearTimeout(killTimer);
    hold.signal.removeEventListener('abort', onLost);
    if ('error' in status) {
      await hold.release().catch(() => {});
      say(`cannot start the supervisor ${supervisor}: ${status.error.message}`);
      return 126;
    }
    if (status.signal !== null) await reapGroup(child.pid!, 0); // the supervisor itself died
    if (lost !== undefined) {
      await reapGroup(child.pid!, 0);
      // Best effort, not waited for: the server may be out of reach, and the lease ends anyway.
      hold.release().catch(() => {});
      abandon = true;
      say(`the command ended after the lock was lost: exit ${EXIT_LOST}`);
      return EXIT_LOST;
    }
    try {
      const released = await hold.release();
      if (released.status === 'not-held') {
        say(`the lock was no longer held when the command ended: exit ${EXIT_LOST}`);
        return EXIT_LOST;
      }
    } catch (error) {
      say(
        `warning: could not release ${JSON.stringify(options.key)} (${(error as Error).message}); it expires with its lease`,
      );
    }
    return status.code ?? 128 + constants.signals[status.signal!];
  } catch (error) {
    if (error instanceof LockLostError) {
      abandon = true;
      say(error.message);
      return EXIT_LOST;
    }
    throw error;
  } finally {
    for (const sig of FORWARDED_SIGNALS) process.off(sig, onSignal);
    if (abandon) client.destroy();
    else await client.close();
  }
}
