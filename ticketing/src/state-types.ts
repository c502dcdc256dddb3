/**
 * What goes into the state machine (state.ts) and what comes out: its commands, its effects, and
 * its read-only views. The server, the cluster node and the observers speak in these; the rules
 * that turn one into the other live in state.ts alone.
 */

import type { LockMode } from './modes.js';

/** Identifies a requester (the server uses its connection id). Opaque to the state machine. */
export type SessionId = number;

export type Command =
  | {
      readonly type: 'acquire';
      readonly session: SessionId;
      readonly key: string;
      readonly owner: string;
      /** 0 = do not wait. */
      readonly waitMs: number;
      /** Default `'x'` (modes.ts). */
      readonly mode?: LockMode;
    }
  | { readonly type: 'release'; readonly session: SessionId; readonly key: string; readonly token: bigint }
  | { readonly type: 'keep'; readonly session: SessionId; readonly key: string; readonly token: bigint }
  /** The key's lease ran out: takes effect only if the key still has that token and is past its
   * expiry (so a stale or early expire is a no-op). */
  | { readonly type: 'expire'; readonly key: string; readonly token: bigint }
  /** A queued request's wait ran out: takes effect only if that waiter is still queued and due. */
  | { readonly type: 'wait-timeout'; readonly key: string; readonly waiter: number }
  /** The session is gone: its queued requests leave their queues. With `notify` they are answered
   * `timed-out` (a draining server), without it they are dropped (a closed connection). Grants
   * are leases, not connections: what the session holds stays held until release or expiry. */
  | { readonly type: 'disconnect'; readonly session: SessionId; readonly notify?: boolean }
  /** Removes expired keys that have no waiters, visiting at most `limit` keys per command
   * (a full pass over a large table is spread over several commands). */
  | { readonly type: 'sweep'; readonly limit?: number }
  /** Cluster mode: registers a grant made elsewhere (a new leader rebuilding the table from etcd),
   * its lease counted from `now`, never from another node's clock. Later tokens are greater than
   * `token`. Throws if the grant does not fit the key as registered so far (another kind, a token
   * or slot already there, beside an exclusive grant). */
  | {
      readonly type: 'adopt';
      readonly key: string;
      readonly owner: string;
      readonly token: bigint;
      /** Default `'x'`. A key's grants are adopted one by one, in token order. */
      readonly mode?: LockMode;
      /** A semaphore grant's slot. */
      readonly slot?: number | undefined;
      /** The key's rev as stored (the key's rev becomes at least this). */
      readonly rev?: bigint;
      /** The grant's published value as stored. */
      readonly value?: string | undefined;
    }
  /** Cluster mode: the lease of the key's grant under `token` counts again from `now + slackMs`
   * (default 0), never ending earlier than it did: a grant's lease counts from when its commit let
   * the reply leave. Takes effect only if the key still carries that token. */
  | { readonly type: 'restart-lease'; readonly key: string; readonly token: bigint; readonly slackMs?: number }
  /** Publish (docs/ticketing-election.md): the value of the key's exclusive grant under exactly
   * `token`, if it is live, becomes `value` (1–512 bytes of printable ASCII). */
  | {
      readonly type: 'publish';
      readonly session: SessionId;
      readonly key: string;
      readonly token: bigint;
      readonly value: string;
    }
  /** The key is observed (`watch`) or no longer (`unwatch`): while it is, its grants end at their
   * expiry (not lazily), it keeps its entry and rev when vacant, and each command that changes it
   * yields one `changed`. Calls do not nest: the observers' registry counts them. */
  | { readonly type: 'watch' | 'unwatch'; readonly key: string };

export type GrantPath =
  /** The key was not registered. */
  | 'free'
  /** The key had expired; this acquire took it over on the spot. */
  | 'takeover'
  /** The holder released; the front waiter got it. */
  | 'handoff'
  /** The key expired with waiters; the front waiter got it at the expiry. */
  | 'expiry'
  /** A waiter ahead of it left the queue (its wait ran out or its session went), and it fit. */
  | 'unblocked';

export type BusyLimit = 'waiters-per-key' | 'waiters' | 'keys' | 'tokens' | 'shared-holders' | 'permits';

export type Effect =
  | {
      readonly type: 'granted';
      readonly session: SessionId;
      readonly key: string;
      readonly owner: string;
      readonly token: bigint;
      readonly expiresAt: number;
      readonly path: GrantPath;
      readonly mode: LockMode;
      /** A semaphore grant's slot (0…N−1); undefined for `x` and `s`. */
      readonly slot: number | undefined;
      /** When the acquire was applied (`now`; for a queued one, when it was queued): the wait
       * from a request's arrival to its grant is `now - requestedAt`. */
      readonly requestedAt: number;
    }
  | {
      readonly type: 'queued';
      readonly session: SessionId;
      readonly key: string;
      readonly owner: string;
      readonly waiter: number;
      readonly deadline: number;
      /** 1 = front of the queue. */
      readonly position: number;
    }
  | {
      readonly type: 'timed-out';
      readonly session: SessionId;
      readonly key: string;
      readonly owner: string;
      /** held: wait 0 on a held key; waited: the wait ran out; cancelled: `disconnect` with notify. */
      readonly reason: 'held' | 'waited' | 'cancelled';
    }
  /** The request's mode does not fit the key's kind (or this state machine takes only `x`): refused
   * at once, not queued, whatever its wait. */
  | { readonly type: 'conflict'; readonly session: SessionId; readonly key: string; readonly owner: string }
  | {
      readonly type: 'busy';
      readonly session: SessionId;
      readonly key: string;
      readonly owner: string;
      readonly limit: BusyLimit;
    }
  | { readonly type: 'released'; readonly session: SessionId; readonly key: string; readonly token: bigint }
  | {
      readonly type: 'not-released';
      readonly session: SessionId;
      readonly key: string;
      readonly token: bigint;
      readonly reason: 'not-registered' | 'token-mismatch';
    }
  /** A keep's results (request op `keep`): the grant's expiry moved to `expiresAt`, at least
   * `leaseMs` (whole ms) after the keep was applied… */
  | {
      readonly type: 'kept';
      readonly session: SessionId;
      readonly key: string;
      readonly owner: string;
      readonly token: bigint;
      readonly expiresAt: number;
      readonly leaseMs: number;
    }
  /** …or the key is not held under that token, and nothing changed. */
  | {
      readonly type: 'gone';
      readonly session: SessionId;
      readonly key: string;
      readonly token: bigint;
      /** not-exclusive: a publish to a shared or semaphore grant. */
      readonly reason: 'not-registered' | 'token-mismatch' | 'expired' | 'not-exclusive';
    }
  /** A publish's result: the key's value is now `value`. (When it fails: `gone`.) */
  | {
      readonly type: 'published';
      readonly session: SessionId;
      readonly key: string;
      readonly token: bigint;
      readonly value: string;
    }
  /** An observed key changed (once per command, after its other effects): its state now. */
  | { readonly type: 'changed'; readonly key: string; readonly state: ObservedState }
  /** A lease ran out and its generation ended (taken over, handed to a waiter, or swept). */
  | { readonly type: 'expired'; readonly key: string; readonly owner: string; readonly token: bigint }
  /** A queued request left its queue without a reply (its session is gone). */
  | {
      readonly type: 'abandoned';
      readonly session: SessionId;
      readonly key: string;
      readonly owner: string;
      readonly waiter: number;
    }
  /** Progress of a sweep pass. */
  | { readonly type: 'swept'; readonly visited: number; readonly removed: number; readonly done: boolean }
  /** An `adopt`: the grant is registered here, expiring at `expiresAt`. */
  | {
      readonly type: 'adopted';
      readonly key: string;
      readonly owner: string;
      readonly token: bigint;
      readonly expiresAt: number;
    }
  /** A `restart-lease` of the grant the key still carries: it now expires at `expiresAt`. */
  | {
      readonly type: 'lease-restarted';
      readonly key: string;
      readonly owner: string;
      readonly token: bigint;
      readonly expiresAt: number;
    };

/** One grant of a key, for views. */
export interface HolderView {
  readonly owner: string;
  readonly token: bigint;
  readonly shared: boolean;
  /** A semaphore holder's slot; undefined for `x` and `s`. */
  readonly slot: number | undefined;
  readonly grantedAt: number;
  readonly expiresAt: number;
  /** Its published value (an exclusive grant's; docs/ticketing-election.md), if any. */
  readonly value: string | undefined;
}

/** What an observer sees of a key: its rev, how many hold it, and the holder if it is exactly one
 * exclusive grant (docs/ticketing-election.md). */
export interface ObservedState {
  readonly rev: bigint;
  readonly count: number;
  readonly exclusive:
    { readonly token: bigint; readonly owner: string; readonly value: string | undefined } | undefined;
}

/** A read-only view of one key, for inspection and tests. `owner`, `token`, `grantedAt` and
 * `expiresAt` are those of its newest grant (its only one unless shared or a semaphore). */
export interface KeyView {
  readonly key: string;
  /** `lock` (modes x and s) or `semaphore`. */
  readonly kind: 'lock' | 'semaphore';
  /** A semaphore's N; undefined for a lock. */
  readonly permits: number | undefined;
  /** Raised by every change of its holders or value (docs/ticketing-election.md "Revs"). */
  readonly rev: bigint;
  readonly owner: string;
  readonly token: bigint;
  readonly grantedAt: number;
  readonly expiresAt: number;
  /** Every grant, oldest first (including expired ones not yet dropped). */
  readonly holders: readonly HolderView[];
  readonly waiters: ReadonlyArray<{
    readonly id: number;
    readonly session: SessionId;
    readonly owner: string;
    readonly mode: LockMode;
    readonly deadline: number;
  }>;
}

/** A held key, in brief (`held`); `owner`, `token`, `expiresAt` are its newest live grant's. */
export interface HeldKey {
  readonly key: string;
  readonly kind: 'lock' | 'semaphore';
  readonly permits: number | undefined;
  readonly rev: bigint;
  readonly owner: string;
  readonly token: bigint;
  readonly expiresAt: number;
  /** Its grants whose lease has not run out, oldest first. */
  readonly holders: readonly HolderView[];
  /** Requests queued for it. */
  readonly waiters: number;
  /** Queued requests by mode: `x`, `s`, or N. */
  readonly waitersByMode: Readonly<Record<string, number>>;
}
