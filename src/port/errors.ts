/**
 * Errors are classes with a stable string `code` (match on `code`, not on the message).
 * I/O failures that are not one of these surface as Node's own errors (`code`, `syscall`, `path`).
 */
import { CodedError } from '../kernel/errors.js';

/** What a lease record said about its holder when an operation was refused. */
export interface LeaseHolder {
  readonly owner: string;
  readonly token: bigint;
  readonly expiry: Date;
}

/** Every lease error: one coded-error base shared with Ticketing (see src/kernel/errors.ts). */
export abstract class LeaseError extends CodedError {}

/**
 * acquire: another live owner holds the lease (transient: try again later).
 * renew: the caller has lost the lease (definitive: stop using the token).
 */
export class LeaseHeldError extends LeaseError {
  readonly code = 'ELEASEHELD';
  constructor(
    message: string,
    readonly sessionId: string,
    /** The record's holder at the time, when there was one. */
    readonly holder?: LeaseHolder,
  ) {
    super(message);
  }
}

/** This backend cannot lease here at all (no flock for this platform or file system). */
export class LeaseUnsupportedError extends LeaseError {
  readonly code = 'ELEASEUNSUPPORTED';
}

/** A held lease's expiry passed before a renew could succeed (renew kept failing transiently). */
export class LeaseExpiredError extends LeaseError {
  readonly code = 'ELEASEEXPIRED';
  constructor(
    message: string,
    readonly sessionId: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** The per-id transition lock was not obtained in time (a wedged or suspended process holds it). */
export class LeaseTimeoutError extends LeaseError {
  readonly code = 'ELEASETIMEOUT';
  constructor(
    message: string,
    readonly sessionId: string,
  ) {
    super(message);
  }
}

/** A lease file cannot be trusted: unparsable record, or not a regular file. Nothing was changed. */
export class LeaseCorruptError extends LeaseError {
  readonly code = 'ELEASECORRUPT';
  constructor(
    message: string,
    readonly path: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** The record's token is 2^64-1: no greater fencing token exists. */
export class LeaseTokenExhaustedError extends LeaseError {
  readonly code = 'ELEASETOKENEXHAUSTED';
  constructor(
    message: string,
    readonly sessionId: string,
  ) {
    super(message);
  }
}
