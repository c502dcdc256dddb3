/**
 * Events on `node:diagnostics_channel` (no logging of our own). Subscribe with
 * `diagnostics_channel.subscribe('flocklease:takeover', (message) => …)`. Every message carries
 * `lease` (the backend instance that published it). Publishing costs nothing without subscribers.
 */
import diagnostics from 'node:diagnostics_channel';
import type { LeaseHolder } from './errors.js';
import type { LeaseGrant, SessionLease } from './types.js';

export interface AcquireMessage {
  readonly lease: SessionLease;
  readonly grant: LeaseGrant;
  /** true when the caller already held it and only the expiry moved (same token). */
  readonly refreshed: boolean;
}
export interface TakeoverMessage {
  readonly lease: SessionLease;
  readonly grant: LeaseGrant;
  /** Why the previous generation could be replaced ('handoff': a release handed it to this waiter). */
  readonly reason: 'crashed' | 'expired' | 'released' | 'handoff';
  /** The replaced holder (absent on a hand-off, which only the releaser saw). */
  readonly previous?: LeaseHolder | undefined;
}
export interface RenewMessage {
  readonly lease: SessionLease;
  readonly grant: LeaseGrant;
}
export interface ReclaimMessage {
  readonly lease: SessionLease;
  readonly grant: LeaseGrant;
  /** The expiry that had passed before this renew reclaimed the lease. */
  readonly expiredAt: Date;
}
export interface ReleaseMessage {
  readonly lease: SessionLease;
  readonly grant: LeaseGrant;
}
export interface LossMessage {
  readonly lease: SessionLease;
  readonly sessionId: string;
  readonly owner: string;
  readonly token: bigint;
  /** The record's holder when the loss was seen, if any. */
  readonly holder?: LeaseHolder | undefined;
}

export const channels = {
  /** Every successful acquire (a takeover also publishes `takeover`). */
  acquire: diagnostics.channel('flocklease:acquire'),
  /** An acquire replaced a previous generation. */
  takeover: diagnostics.channel('flocklease:takeover'),
  /** A renew extended a still-valid lease. */
  renew: diagnostics.channel('flocklease:renew'),
  /** A renew found its lease expired but not taken over, and kept it (sleep-past-TTL). */
  reclaim: diagnostics.channel('flocklease:reclaim'),
  /** A release wrote the tombstone. */
  release: diagnostics.channel('flocklease:release'),
  /** A renew found the lease lost (taken over, broken, or no longer held here). */
  loss: diagnostics.channel('flocklease:loss'),
} as const;
