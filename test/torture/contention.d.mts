// Types of contention.mjs.
import type { CheckResult, History } from './checker.mjs';

export interface ContentionOptions {
  /** where the run directory is made (a disk dir or tmpfs) */
  root: string;
  seconds?: number;
  workers?: number;
  ids?: number;
  ttlMs?: number;
  transitionTimeoutMs?: number;
  holdMaxMs?: number;
  pauseMaxMs?: number;
  actionEveryMs?: [number, number];
  maxStopped?: number;
  /** faults the run goes on sending past `seconds` (for at most as long again) until it has sent them */
  atLeast?: { kills: number; suspensions: number };
  /** break the lease on purpose (worker.mjs): the checker must then find violations */
  mutant?: 'probe-lies' | 'clock-ahead' | 'token-regress';
}
export interface ContentionResult extends CheckResult {
  runDir: string;
  history: History;
}
export function runContention(options: ContentionOptions): Promise<ContentionResult>;
export function loadHistory(runDir: string): History;
