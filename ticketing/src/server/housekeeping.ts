/**
 * The server's periodic work: the sweep of expired keys, the idle and line timeouts, and the
 * state file's top-up.
 */
import { performance } from 'node:perf_hooks';
import { channels, publish } from '../events.js';
import type { TokenStore } from '../token-store.js';
import type { CommandApplier } from './applier.js';
import type { Closer } from './closer.js';
import type { OpenConnections } from './connection.js';
import type { ServerConfig } from './options.js';
import type { Outbox } from './replies.js';

/** Keys visited per sweep slice, so a sweep of a large table never stalls the loop. */
const SWEEP_SLICE = 10_000;

export type HousekeepingConfig = Pick<
  ServerConfig,
  'clock' | 'gate' | 'sweepIntervalMs' | 'idleTimeoutMs' | 'lineTimeoutMs'
>;

export class Housekeeping {
  #sweepTimer: NodeJS.Timeout | undefined;
  #sweeping = false;
  #topUpTimer: NodeJS.Timeout | undefined;
  #idleTimer: NodeJS.Timeout | undefined;
  #stopped = false;

  constructor(
    /** The `server` of every diagnostics_channel message. */
    private readonly owner: object,
    private readonly config: HousekeepingConfig,
    private readonly applier: CommandApplier,
    private readonly open: OpenConnections,
    private readonly closer: Closer,
    private readonly outbox: Outbox,
  ) {}

  /** Starts the periodic timers (once listening); `store`: the state file to top up. */
  start(store: TokenStore | undefined): void {
    const { config } = this;
    // Cluster mode expires eagerly (every grant has a deadline): nothing is left to sweep.
    if (config.gate === undefined) this.#sweepTimer = setInterval(() => this.#sweep(), config.sweepIntervalMs).unref();
    if (store !== undefined) this.#topUpTimer = setInterval(() => this.#topUp(store), 1_000).unref();
    // One pass over the connections per quarter of the shorter timeout (a connection is cut up to
    // a quarter late, never early), instead of a timer re-armed on every chunk.
    const idleTick = Math.max(10, Math.min(1_000, Math.min(config.idleTimeoutMs, config.lineTimeoutMs) / 4));
    this.#idleTimer = setInterval(() => this.#cutIdle(), idleTick).unref();
  }

  stop(): void {
    this.#stopped = true;
    clearInterval(this.#sweepTimer);
    clearInterval(this.#topUpTimer);
    clearInterval(this.#idleTimer);
  }

  /** Starts a sweep pass (expired keys without waiters), spread over slices of the table. */
  #sweep(): void {
    if (this.#sweeping || this.#stopped) return;
    this.#sweeping = true;
    const { applier, config } = this;
    const slice = (): void => {
      if (this.#stopped) return;
      const effects = applier.state!.apply({ type: 'sweep', limit: SWEEP_SLICE }, config.clock());
      for (const effect of effects) applier.publish(effect);
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
    const { lineTimeoutMs, idleTimeoutMs } = this.config;
    const { closer } = this;
    const now = performance.now();
    const state = this.applier.state;
    for (const conn of this.open.values()) {
      // Unauthenticated ones have the auth timeout; paused ones the write timeout.
      if (conn.closing || conn.paused || !conn.authed) continue;
      if (conn.lineSince >= 0) {
        if (now - conn.lineSince >= lineTimeoutMs) {
          closer.fail(conn, 'bad_request', `no end of line within ${lineTimeoutMs} ms`, 'line-timeout');
        }
      } else if (
        now - Math.max(conn.lastReadAt, conn.holdsUntil) >= idleTimeoutMs &&
        !(state?.hasWaiters(conn.id) ?? false) &&
        !(conn.observing !== undefined && conn.observing.size > 0)
      ) {
        closer.shut(conn, 'idle');
      }
    }
    this.outbox.flush();
  }

  #topUp(store: TokenStore): void {
    store.topUp(this.applier.state!.lastToken);
    const error = store.takeError();
    if (error !== undefined) publish(channels.serverReserve, () => ({ server: this.owner, error }));
  }
}
