/** flocklease: leases with a time limit and a fencing token, for processes on one host. */
export { Lease, type FileLeaseOptions } from './flock/lease.js';
export { MemoryLease } from './memory/memory-lease.js';
export {
  LeaseError,
  LeaseHeldError,
  LeaseUnsupportedError,
  LeaseTimeoutError,
  LeaseCorruptError,
  LeaseTokenExhaustedError,
  LeaseExpiredError,
  type LeaseHolder,
} from './port/errors.js';
export type { AcquireOptions, LeaseGrant, LeaseOptions, OperationOptions, SessionLease } from './port/types.js';
export { holdLease, type HoldOptions, type LeaseHold } from './port/hold.js';
export { channels } from './port/events.js';
export type {
  AcquireMessage,
  TakeoverMessage,
  RenewMessage,
  ReclaimMessage,
  ReleaseMessage,
  LossMessage,
} from './port/events.js';
export {
  inspectLeaseDir,
  pruneLeaseDir,
  repairLease,
  forceRelease,
  LEASE_STATES,
  DEFAULT_PRUNE_AGE_MS,
  type LeaseState,
  type LeaseRow,
  type LeaseWaiter,
  type Leftover,
  type LeftoverKind,
  type Inspection,
  type InspectOptions,
  type MutationOptions,
  type PruneOptions,
  type PruneResult,
  type PruneRemoval,
  type PrunedKind,
  type PruneSkip,
  type RepairResult,
  type ForceReleaseResult,
} from './flock/operator/index.js';
/** The `flocklease run` supervisor executable (`ticketing run` runs its commands under it too). */
export { supervisorPath } from './native.js';
