/**
 * The hand-off: a release gives the lease straight to the first live waiter in line, and that
 * waiter takes it. One route, both ends under the id's transition lock:
 * - the releaser renames the waiter's flocked `.wait` file to the new generation's `.live` (a
 *   rename keeps the inode, and so the flock) and commits the record naming it (give);
 * - the waiter, woken by the releaser's close of its old `.live`, finds that the record names it
 *   and that `.live` is its own `.wait` (acquireState's `handed-over`), and holds it (take).
 */
import { publish } from '../kernel/events.js';
import { channels } from '../port/events.js';
import type { LeaseGrant, SessionLease } from '../port/types.js';
import type { Generations } from './generations.js';
import type { CommitError } from './io.js';
import type { DirPaths } from './layout.js';
import { grantOf, isExpired, type LeaseRecord } from './record.js';
import type { TransitionContext } from './transition.js';
import type { WaitLine } from './waitline.js';

export interface HandOffsOptions {
  /** The lease the events name. */
  readonly lease: SessionLease;
  readonly generations: Generations;
  readonly line: WaitLine;
  readonly paths: DirPaths;
}

export class HandOffs {
  readonly #lease: SessionLease;
  readonly #generations: Generations;
  readonly #line: WaitLine;
  readonly #paths: DirPaths;

  constructor(options: HandOffsOptions) {
    this.#lease = options.lease;
    this.#generations = options.generations;
    this.#line = options.line;
    this.#paths = options.paths;
  }

  /**
   * Releases generation `token`: hands the lease to the first live waiter in line, or, with nobody
   * in line, makes the record a tombstone. Our `.live` goes either way. A waiter that gave up
   * meanwhile passes it to the next one in line.
   */
  async give(tx: TransitionContext, token: bigint): Promise<void> {
    const { safe, sessionId, now } = tx;
    const ourLive = this.#paths.live(safe, token);
    for (let handOff = this.#line.nextInLine(tx, token); ; handOff = this.#line.nextInLine(tx, token)) {
      if (handOff === undefined) {
        const tombstone = { owner: '', token, expiryMs: now, session: sessionId };
        await this.#generations.commit(safe, tombstone, { remove: [ourLive] });
        return;
      }
      const { waiter, next } = handOff;
      const adoptFrom = this.#line.waitPath(safe, waiter.ticket);
      const plan = { live: this.#paths.live(safe, next), adoptFrom, remove: [ourLive] };
      try {
        // No turn split (yieldIfRunStarts): the waiter, and the transition lock held here, would
        // wait for this loop's every ready callback; a hand-off goes straight on.
        const record = { owner: waiter.owner, token: next, expiryMs: now + waiter.ttlMs, session: sessionId };
        await this.#generations.commit(safe, record, plan, false);
      } catch (error) {
        const failure = error as CommitError;
        // The waiter gave up just now (it removes its .wait file without our lock): nothing
        // changed, so hand to the next one in line instead.
        if (failure.committed || failure.code !== 'ENOENT' || failure.path !== adoptFrom) throw error;
        this.#line.handedOff(tx);
        continue;
      }
      this.#line.handedOff(tx);
      return;
    }
  }

  /**
   * Takes the lease a release handed to this transition's waiting place (acquireState said
   * `handed-over`): our `.wait` file is its `.live`, now held as ours. A hand-off found expired
   * (its waiter woke too late) was taken by nobody meanwhile, so it is kept with `expiryMs`, as a
   * renew would.
   */
  async take(tx: TransitionContext, owner: string, record: LeaseRecord, expiryMs: number): Promise<LeaseGrant> {
    const { safe, sessionId, now, place } = tx;
    const { token } = record;
    this.#generations.adopt(safe, place!, owner, token);
    let grant: LeaseGrant;
    if (!isExpired(record, now)) grant = grantOf(sessionId, owner, token, record.expiryMs);
    else {
      await this.#generations.commit(safe, { owner, token, expiryMs, session: sessionId });
      grant = grantOf(sessionId, owner, token, expiryMs);
    }
    publish(channels.acquire, () => ({ lease: this.#lease, grant, refreshed: false }));
    publish(channels.takeover, () => ({ lease: this.#lease, grant, reason: 'handoff' as const }));
    return grant;
  }
}
