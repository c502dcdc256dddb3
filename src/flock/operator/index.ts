/**
 * The operator's side of a lease directory: look at it without disturbing anything (inspect),
 * clean up what finished leases left behind (prune), replace a corrupt record (repair), and break
 * a lease (forceRelease). The `flocklease` CLI is a thin layer over these.
 *
 * Mutations work one id at a time under that id's transition lock (`<safeID>.lock`, the same flock
 * every lease operation takes), so they never interleave with an acquire, renew or release. Inspect
 * takes no lock and creates nothing: it reads records, probes the current generation's `.live` with
 * a shared non-blocking flock (as an acquirer does), and learns everything else — which other lock
 * files are held, and by which process — from /proc/locks, without opening them.
 */
export * from './types.js';
export { inspectLeaseDir } from './inspect.js';
export { forceRelease, repairLease } from './repair.js';
export { pruneLeaseDir } from './prune.js';
