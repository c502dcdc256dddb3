/**
 * Access control on the server (docs/ticketing-access.md): establishes who a connection is (at
 * `H`, or from its client certificate when it is accepted), checks each request's verb on its key
 * and the identity's quotas, and answers a refusal itself (`F`, or `B` over a quota) without
 * touching the lock table. The rules are access.ts's; the counts are quotas.ts's. The request
 * handler (requests.ts) consults it before it turns a request into a command.
 */
import { channels, publish } from '../events.js';
import { formatBusy, formatForbidden } from '../protocol.js';
import type { AccessRules, Identity, Verb } from './access.js';
import { secretDigest } from './access.js';
import type { Closer } from './closer.js';
import type { Connection, OpenConnections } from './connection.js';
import type { QuotaLedger } from './quotas.js';
import type { Outbox } from './replies.js';

export class Authorizer {
  #rules: AccessRules;

  constructor(
    rules: AccessRules,
    /** The `server` of every diagnostics_channel message. */
    private readonly owner: object,
    private readonly ledger: Pick<QuotaLedger, 'usage'>,
    private readonly outbox: Pick<Outbox, 'send'>,
    private readonly closer: Pick<Closer, 'fail'>,
    /** The connections a reload looks through. */
    private readonly open: OpenConnections,
  ) {
    this.#rules = rules;
  }

  /** `H <secret>`: the connection is the identity whose secret this is; false if none. */
  identifySecret(conn: Connection, secret: string): boolean {
    const digest = secretDigest(secret);
    return this.#identify(conn, this.#rules.byDigest(digest), digest);
  }

  /** A verified client certificate's subject CN: the connection is the identity with that `cn`;
   * false if none (it may still send `H`). */
  identifyCertificate(conn: Connection, cn: string | undefined): boolean {
    return cn !== undefined && this.#identify(conn, this.#rules.byCertificate(cn), cn);
  }

  #identify(conn: Connection, identity: Identity | undefined, credential: Buffer | string): boolean {
    if (identity === undefined) return false;
    const usage = this.ledger.usage(identity.name);
    usage.countsHeld = identity.maxHeld !== Infinity;
    conn.peer = { identity, usage, credential };
    return true;
  }

  /** An acquire: refused `F <owner> <key>` without `lock` on the key, `B <owner> <key>` over a
   * quota (held and queued together at `maxHeld`: each queued request may become a grant; or, for
   * one that may wait, queued at `maxWaiting`). Returns whether it may be applied. */
  acquire(conn: Connection, key: string, owner: string, waitMs: number): boolean {
    const { identity, usage } = conn.peer!;
    if (!identity.may('lock', key)) return this.#refuse(conn, 'lock', key, formatForbidden(owner, key));
    if (usage.held + usage.waiting >= identity.maxHeld)
      return this.#refuse(conn, 'maxHeld', key, formatBusy(owner, key));
    if (waitMs > 0 && usage.waiting >= identity.maxWaiting)
      return this.#refuse(conn, 'maxWaiting', key, formatBusy(owner, key));
    return true;
  }

  /** A request that names a grant by its token (release, keep, publish): refused `F <token> <key>`
   * without `lock` on the key. */
  token(conn: Connection, key: string, token: bigint): boolean {
    return conn.peer!.identity.may('lock', key) || this.#refuse(conn, 'lock', key, formatForbidden(token, key));
  }

  /** An observe: refused `F <key> <key>` without `observe` on the key. */
  observe(conn: Connection, key: string): boolean {
    return conn.peer!.identity.may('observe', key) || this.#refuse(conn, 'observe', key, formatForbidden(key, key));
  }

  #refuse(conn: Connection, verb: Verb | 'maxHeld' | 'maxWaiting', key: string, reply: string): false {
    this.outbox.send(conn, reply);
    publish(channels.serverRefused, () => ({
      server: this.owner,
      connection: conn.id,
      identity: conn.peer!.identity.name,
      verb,
      key,
    }));
    return false;
  }

  /**
   * New rules, from now on. Each open connection is looked up again by how it proved who it is:
   * still the same identity (by name), it goes on under the new rules and quotas; otherwise (the
   * identity was removed, renamed, or its secret or cn changed) it is answered `E auth_failed` and
   * closed. Returns how many were closed.
   */
  replace(rules: AccessRules): number {
    this.#rules = rules;
    let closed = 0;
    for (const conn of this.open.values()) {
      const peer = conn.peer;
      if (peer === undefined || conn.closing) continue;
      const { credential } = peer;
      const identity = typeof credential === 'string' ? rules.byCertificate(credential) : rules.byDigest(credential);
      if (identity?.name === peer.identity.name) {
        peer.identity = identity;
        peer.usage.countsHeld = identity.maxHeld !== Infinity;
      } else {
        this.closer.fail(conn, 'auth_failed', 'the access rules no longer admit this identity');
        closed++;
      }
    }
    return closed;
  }

  /** The identity an HTTP request proves (its client certificate's CN first, then its bearer
   * secret), or undefined. */
  reader(secret: string | undefined, cn: string | undefined): Identity | undefined {
    const rules = this.#rules;
    return rules.byCertificate(cn) ?? (secret === undefined ? undefined : rules.bySecret(secret));
  }
}
