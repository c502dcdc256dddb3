/**
 * Commands in, effects out: applies a command to the state, publishes each effect, hands it to
 * the cluster gate, and turns the ones that answer a request into replies through the one reply
 * sink (replies.ts), the same way in single and cluster mode.
 */
import { performance } from 'node:perf_hooks';
import { channels, publish } from '../events.js';
import type { Command, Effect, ObservedState } from '../state-types.js';
import type { TicketState } from '../state.js';
import type { ServerGate } from './cluster-host.js';
import type { Connection, OpenConnections } from './connection.js';
import type { QuotaLedger } from './quotas.js';
import { B, C, G, N, R, T, type ReplySink } from './replies.js';

/** Sessions for grants made by the server itself (an undeliverable grant's release). */
const INTERNAL_SESSION = -1;

export class CommandApplier {
  /** The state commands are applied to; undefined in cluster mode while this node does not lead. */
  state: TicketState | undefined;
  /** While a chunk is handled: the clock and performance.now() read once for all its requests
   * (-1: none, read them per command). */
  chunkNow = -1;
  chunkPerfNow = 0;

  constructor(
    /** The `server` of every diagnostics_channel message. */
    private readonly owner: object,
    private readonly clock: () => number,
    /** Cluster mode: sees every effect. */
    private readonly gate: Pick<ServerGate, 'effect'> | undefined,
    private readonly sink: ReplySink,
    /** Where a grant's connection is looked up (a grant to one that is gone is released). */
    private readonly open: OpenConnections,
    /** Where a watched key's changes go (observers.ts). */
    private readonly changed: (key: string, state: ObservedState) => void,
    /** Access control's quotas: count every effect. */
    private readonly quotas?: Pick<QuotaLedger, 'count'>,
  ) {}

  apply(command: Command): void {
    const state = this.state;
    if (state === undefined) return; // cluster mode, not leading: nothing to apply to
    const now = this.chunkNow >= 0 ? this.chunkNow : this.clock();
    const effects = state.apply(command, now);
    const { gate, quotas } = this;
    // Index loop: an undeliverable grant appends the effects of its release.
    for (let i = 0; i < effects.length; i++) {
      const effect = effects[i]!;
      this.publish(effect);
      gate?.effect(effect);
      quotas?.count(state, effect);
      this.#deliver(state, effect, effects, now);
    }
  }

  /** The effect's diagnostics_channel messages (built only when someone listens). */
  publish(effect: Effect): void {
    if (channels.serverEffect.hasSubscribers) channels.serverEffect.publish({ server: this.owner, effect });
    if (effect.type === 'expired' && channels.serverExpired.hasSubscribers) {
      const { key, owner, token } = effect;
      channels.serverExpired.publish({ server: this.owner, key, owner, token });
    }
  }

  /** A grant whose connection is gone: reported, and released at once so that the next waiter
   * gets the key instead of everyone waiting out a lease no one holds. Returns the release. */
  undeliverable(session: number, key: string, token: bigint): Command {
    publish(channels.serverUndeliverable, () => ({ server: this.owner, connection: session, key, token }));
    return { type: 'release', session: INTERNAL_SESSION, key, token };
  }

  #deliver(state: TicketState, effect: Effect, effects: Effect[], now: number): void {
    const sink = this.sink;
    switch (effect.type) {
      case 'granted': {
        const conn = this.open.get(effect.session);
        if (conn === undefined || conn.closing || !conn.socket.writable) {
          const release = this.undeliverable(effect.session, effect.key, effect.token);
          for (const more of state.apply(release, now)) effects.push(more);
          return;
        }
        sink.acquired(conn, effect.token, effect.owner, effect.key, effect.slot ?? -1);
        this.#holds(conn, effect.expiresAt, now);
        return;
      }
      case 'timed-out':
        return sink.refused(effect.session, T, effect.owner, effect.key);
      case 'busy':
        return sink.refused(effect.session, B, effect.owner, effect.key);
      case 'conflict':
        return sink.refused(effect.session, C, effect.owner, effect.key);
      case 'released':
        return sink.releaseReply(effect.session, R, effect.token, effect.key);
      case 'not-released':
        return sink.releaseReply(effect.session, N, effect.token, effect.key);
      case 'kept': {
        sink.kept(effect.session, effect.token, effect.key, effect.leaseMs);
        // The connection that kept a grant holds it as long as a grant made on it.
        const conn = this.open.get(effect.session);
        if (conn !== undefined) this.#holds(conn, effect.expiresAt, now);
        return;
      }
      case 'gone':
        return sink.releaseReply(effect.session, G, effect.token, effect.key);
      case 'published':
        return sink.published(effect.session, effect.token, effect.key);
      case 'changed':
        return this.changed(effect.key, effect.state);
      default:
        return; // queued, expired, abandoned, swept, adopted, lease-restarted: state only
    }
  }

  /** The connection holds a lease until `expiresAt` (for its idle timeout, on the monotonic clock). */
  #holds(conn: Connection, expiresAt: number, now: number): void {
    const perfNow = this.chunkNow >= 0 ? this.chunkPerfNow : performance.now();
    const holdsUntil = perfNow + (expiresAt - now);
    if (holdsUntil > conn.holdsUntil) conn.holdsUntil = holdsUntil;
  }
}
