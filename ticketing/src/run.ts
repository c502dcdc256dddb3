/**
 * `ticketing run`: run a command on one host of many. Hold the key (waiting up to --wait), run the
 * command with `TICKETING_KEY`/`TICKETING_TOKEN`, keep the lock alive while it runs, release when
 * it exits, and exit with its status. On loss the command's process group gets SIGTERM, then
 * SIGKILL after the grace, both before the local deadline (the grace is taken out of it). With
 * `--publish`, the value is published once the key is held, before the command starts. The
 * command runs under flocklease's supervisor (`flocklease run`'s), which kills the group when
 * `run` dies, even by SIGKILL. Exit codes as `flocklease run`'s (docs/cli.md "Exit codes").
 */
import type { ConnectionOptions } from 'node:tls';
import { EXIT_HELD, EXIT_LOST, EXIT_NOT_STARTED, exitStatus, Supervision } from '#kernel';
import { TicketClient } from './client.js';
import type { TicketHold } from './client/hold.js';
import { LockLostError, NotAcquiredError, RunUnsupportedError } from './errors.js';

export interface RunOptions {
  readonly addresses: readonly string[];
  readonly key: string;
  readonly secret: string | undefined;
  /** TLS to the servers (Node's `tls.connect` options); undefined: plain TCP. */
  readonly tls?: ConnectionOptions | undefined;
  /** 0: fail at once when held; Infinity: wait until a signal. */
  readonly waitMs: number;
  /** Hold one of N permits (the command gets `TICKETING_SLOT`), or a shared hold. */
  readonly permits?: number | undefined;
  readonly shared?: boolean | undefined;
  /** Published once the key is held, before the command starts (`client.campaign`'s `value`). */
  readonly publish?: string | undefined;
  /** Between SIGTERM and SIGKILL after a loss, ms; undefined: a tenth of the lease. */
  readonly killAfterMs: number | undefined;
  readonly command: readonly string[];
}

/** `--wait forever` on the wire: the longest wait a request carries (a safe integer of ms). */
const FOREVER_MS = Number.MAX_SAFE_INTEGER;
/** The grace as a share of the lease when --kill-after is not given. */
const GRACE_FRACTION = 0.1;

/**
 * flocklease's supervisor, a native executable: `ticketing run` needs the flocklease package (an
 * optional peer dependency of this one), and nothing else of Ticketing does.
 */
async function supervisorPath(): Promise<string> {
  let flocklease: { supervisorPath(): string };
  try {
    flocklease = await import('flocklease');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ERR_MODULE_NOT_FOUND') throw error;
    throw new RunUnsupportedError(
      'ticketing run needs the flocklease package (its native supervisor runs the command): npm i flocklease',
      { cause: error },
    );
  }
  return flocklease.supervisorPath();
}

export async function runCommand(options: RunOptions, say: (line: string) => void): Promise<number> {
  const supervisor = await supervisorPath(); // missing: fail before taking the lock
  const client = new TicketClient({ addresses: options.addresses, secret: options.secret, tls: options.tls });
  const supervision = new Supervision();
  /** Close without waiting for what is in flight (after a loss). */
  let abandon = false;
  try {
    let hold: TicketHold;
    try {
      const holdOptions = {
        waitMs: Math.min(options.waitMs, FOREVER_MS),
        signal: supervision.waitSignal,
        margin:
          options.killAfterMs === undefined
            ? { fraction: 0.01 + GRACE_FRACTION }
            : { fraction: 0.01, ms: 50 + options.killAfterMs },
      };
      hold =
        options.publish === undefined
          ? await client.hold(options.key, { ...holdOptions, permits: options.permits, shared: options.shared })
          : await client.campaign(options.key, { ...holdOptions, value: options.publish });
    } catch (error) {
      if (supervision.interruptedStatus !== undefined) return supervision.interruptedStatus;
      if (error instanceof NotAcquiredError && error.status === 'timed-out') {
        say(
          `key ${JSON.stringify(options.key)} ${options.waitMs > 0 ? `not obtained within ${options.waitMs} ms: it is` : 'is'} held by another owner`,
        );
        return EXIT_HELD;
      }
      throw error;
    }
    const graceMs = options.killAfterMs ?? hold.leaseMs * GRACE_FRACTION;
    let lost: unknown;
    const onLost = (): void => {
      if (!(hold.signal.reason instanceof Error) || hold.signal.reason.name === 'AbortError') return; // released
      lost = hold.signal.reason;
      if (!supervision.running) return;
      say(`${(lost as Error).message}; terminating the command (SIGTERM, SIGKILL after ${Math.round(graceMs)} ms)`);
      supervision.terminate(graceMs);
    };
    hold.signal.addEventListener('abort', onLost, { once: true });
    const started = await supervision.run({
      supervisor,
      command: options.command,
      env: {
        ...process.env,
        TICKETING_KEY: options.key,
        TICKETING_TOKEN: String(hold.token),
        ...(hold.slot === undefined ? {} : { TICKETING_SLOT: String(hold.slot) }),
      },
    });
    hold.signal.removeEventListener('abort', onLost);
    if ('notStarted' in started) {
      await hold.release().catch(() => {});
      say(started.notStarted);
      return EXIT_NOT_STARTED;
    }
    if (lost !== undefined) {
      await supervision.reap(0);
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
    return exitStatus(started.end);
  } catch (error) {
    if (error instanceof LockLostError) {
      abandon = true;
      say(error.message);
      return EXIT_LOST;
    }
    throw error;
  } finally {
    supervision.close();
    if (abandon) client.destroy();
    else await client.close();
  }
}
