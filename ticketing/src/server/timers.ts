/**
 * The server's time: the one deadline timer that feeds `expire` and `wait-timeout` to the state,
 * the sweep of expired keys, the idle and line timeouts, and the state file's top-up.
 */
import { performance } from 'node:perf_hooks';
import { timerDelay } from '#kernel';
import { channels, publish } from '../events.js';
import type { ServerCore } from './core.js';

/** Keys visited per sweep slice, so a sweep of a large table never stalls the loop. */
const SWEEP_SLICE = 10_000;
/** Due commands applied per timer callback before yielding to I/O. */
const DUE_BATCH = 10_000;

export class Timers {
  #deadlineTimer: NodeJS.Timeout | undefined;
  #deadlineAt = Infinity;
  #sweepTimer: NodeJS.Timeout | undefined;
  #sweeping = false;
  #topUpTimer: NodeJS.Timeout | undefined;
  #idleTimer: NodeJS.Timeout | undefined;

  constructor(private readonly core: ServerCore) {}

  /** Starts the periodic timers (once listening). */
  start(): void {
    const { core } = this;
    const config = core.config;
    // Cluster mode expires eagerly (every grant has a deadline): nothing is left to sweep.
    if (config.gate === undefined) this.#sweepTimer = setInterval(() => this.#sweep(), config.sweepIntervalMs).unref();
    if (core.store !== undefined) this.#topUpTimer = setInterval(() => this.#topUp(), 1_000).unref();
    // One pass over the connections per quarter of the shorter timeout (a connection is cut up to
    // a quarter late, never early), instead of a timer re-armed on every chunk.
    const idleTick = Math.max(10, Math.min(1_000, Math.min(config.idleTimeoutMs, config.lineTimeoutMs) / 4));
    this.#idleTimer = setInterval(() => this.#cutIdle(), idleTick).unref();
  }

  stop(): void {
    clearInterval(this.#sweepTimer);
    clearInterval(this.#topUpTimer);
    clearInterval(this.#idleTimer);
    this.clearDeadline();
  }

  /** Forgets the armed deadline (the state it came from is gone). */
  clearDeadline(): void {
    clearTimeout(this.#deadlineTimer);
    this.#deadlineTimer = undefined;
    this.#deadlineAt = Infinity;
  }

  /** Arms the one timer for the earliest deadline in the state machine. */
  schedule(): void {
    const { core } = this;
    const next = core.state?.nextDeadline();
    if (next === undefined || next >= this.#deadlineAt || core.closing) return;
    clearTimeout(this.#deadlineTimer);
    this.#deadlineAt = next;
    // setTimeout turns a delay past 2^31-1 ms into 1 ms (a spin). A waiter's far deadline is never
    // the earliest (its key's lease expiry, at most 2^31-1 ms away, comes first), so this is
    // defence only; the timer re-arms if it fires early.
    const delay = timerDelay(Math.ceil(next - core.config.clock()));
    this.#deadlineTimer = setTimeout(this.#onDeadline, delay).unref();
  }

  readonly #onDeadline = (): void => {
    this.#deadlineTimer = undefined;
    this.#deadlineAt = Infinity;
    const { core } = this;
    const state = core.state;
    if (state === undefined) return;
    const now = core.config.clock();
    for (let n = 0; n < DUE_BATCH; n++) {
      const command = state.nextDue(now);
      if (command === undefined) break;
      core.delivery.run(command);
    }
    core.outbox.flush();
    this.schedule();
  };

  /** Starts a sweep pass (expired keys without waiters), spread over slices of the table. */
  #sweep(): void {
    const { core } = this;
    if (this.#sweeping || core.closing) return;
    this.#sweeping = true;
    const slice = (): void => {
      if (core.closing) return;
      const effects = core.state!.apply({ type: 'sweep', limit: SWEEP_SLICE }, core.config.clock());
      for (const effect of effects) core.delivery.publish(effect);
      const last = effects[effects.length - 1];
      if (last?.type === 'swept' && !last.done) setImmediate(slice);
      else this.#sweeping = false;
    };
    slice();
  }

  /**
   * Closes connections that hold a slot for nothing: a line unfinished for the line timeout
   * (`E bad_request`), or nothing pending for the idle timeout (a quiet FIN: the client reconnects
   * on its next request). Without this, `--max-connections` idle or half-sent sockets would lock
   * every real client out for as long as they stayed open.
   */
  #cutIdle(): void {
    const { core } = this;
    const { lineTimeoutMs, idleTimeoutMs } = core.config;
    const now = performance.now();
    const state = core.state;
    for (const conn of core.connections.values()) {
      // Unauthenticated ones have the auth timeout; paused ones the write timeout.
      if (conn.closing || conn.paused || !conn.authed) continue;
      if (conn.lineSince >= 0) {
        if (now - conn.lineSince >= lineTimeoutMs) {
          core.conns.fail(conn, 'bad_request', `no end of line within ${lineTimeoutMs} ms`, 'line-timeout');
        }
      } else if (
        now - Math.max(conn.lastReadAt, conn.holdsUntil) >= idleTimeoutMs &&
        !(state?.hasWaiters(conn.id) ?? false)
      ) {
        core.conns.shut(conn, 'idle');
      }
    }
    core.outbox.flush();
  }

  #topUp(): void {
    const { core } = this;
    const store = core.store!;
    store.topUp(core.state!.lastToken);
    const error = store.takeError();
    if (error !== undefined) publish(channels.serverReserve, () => ({ server: core.owner, error }));
  }
}
