/**
 * Access control's quotas: what each identity holds and has queued, across all its connections,
 * counted from the state machine's effects (fed by the command applier, outside state.ts).
 *
 * - held: grants made to one of its connections, until they are released or end by expiry
 *   (whichever connection releases them, and after their connection closed);
 * - waiting: its requests in a queue, until granted, timed out, or dropped with their connection.
 *
 * Held grants are counted only for identities with a `maxHeld` (each costs a table entry while it
 * lasts); a quota that a reload adds counts the grants made from then on. The counts belong to one
 * lock table: a cluster node that leads again starts from zero (the grants it adopts from etcd carry
 * no connection, so they count against no identity).
 */
import type { Effect, SessionId } from '../state-types.js';
import { Table } from '../table.js';

/** One identity's usage, shared by its connections. */
export class Usage {
  held = 0;
  waiting = 0;
  /** Whether grants are counted in `held` (the identity has a `maxHeld`). */
  countsHeld = false;
}

/** A grant counted against an identity; a key's grants are chained (shared and semaphore keys
 * have several). */
interface CountedGrant {
  readonly token: bigint;
  readonly usage: Usage;
  next: CountedGrant | undefined;
}

export class QuotaLedger {
  readonly #usage = new Map<string, Usage>();
  /** The counted grants, by key. */
  #grants = new Table<CountedGrant>();
  /** The table the counts belong to. */
  #table: object | undefined;

  constructor(
    /** The usage a session counts against (its connection's identity), if any. */
    private readonly usageOf: (session: SessionId) => Usage | undefined,
  ) {}

  /** The identity's usage (the same object for as long as the server runs). */
  usage(identity: string): Usage {
    let usage = this.#usage.get(identity);
    if (usage === undefined) this.#usage.set(identity, (usage = new Usage()));
    return usage;
  }

  /** One effect of `table` (the state machine that produced it). */
  count(table: object, effect: Effect): void {
    if (table !== this.#table) this.#reset(table);
    switch (effect.type) {
      case 'granted': {
        const usage = this.usageOf(effect.session);
        if (usage === undefined) return;
        // A grant from the queue (any other path than free or takeover) was waiting until now.
        if (effect.path !== 'free' && effect.path !== 'takeover') usage.waiting--;
        if (!usage.countsHeld) return;
        usage.held++;
        const counted: CountedGrant = { token: effect.token, usage, next: undefined };
        // Chained behind it: the key's other counted grants (shared or semaphore), if any.
        counted.next = this.#grants.set(effect.key, counted);
        return;
      }
      case 'queued': {
        const usage = this.usageOf(effect.session);
        if (usage !== undefined) usage.waiting++;
        return;
      }
      case 'timed-out':
        if (effect.reason !== 'held') this.#leftQueue(effect.session);
        return;
      case 'abandoned':
        return this.#leftQueue(effect.session);
      case 'released':
      case 'expired':
        return this.#ended(effect.key, effect.token);
      default:
        // busy, conflict, not-released, kept, gone, swept, adopted, lease-restarted: no change
        // (a `busy` for a waiter the token space ran out for, after 2^64 tokens, is not counted).
        return;
    }
  }

  #leftQueue(session: SessionId): void {
    const usage = this.usageOf(session);
    if (usage !== undefined) usage.waiting--;
  }

  #ended(key: string, token: bigint): void {
    const grants = this.#grants;
    if (grants.size === 0) return;
    const first = grants.take(key);
    if (first === undefined) return;
    let previous: CountedGrant | undefined;
    let grant: CountedGrant | undefined = first;
    for (; grant !== undefined; previous = grant, grant = grant.next) {
      if (grant.token !== token) continue;
      grant.usage.held--;
      if (previous !== undefined) previous.next = grant.next;
      break;
    }
    // The key's other counted grants stay.
    const rest = grant === first ? first.next : first;
    if (rest !== undefined) grants.set(key, rest);
  }

  #reset(table: object): void {
    this.#table = table;
    this.#grants = new Table<CountedGrant>();
    for (const usage of this.#usage.values()) usage.held = usage.waiting = 0;
  }
}
