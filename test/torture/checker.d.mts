// Types of checker.mjs (the checker is plain JavaScript so that the soak runs it without a build).

export interface WorkerEvent {
  ev: string;
  at: number;
  [field: string]: unknown;
}
export interface WorkerLog {
  pid: number;
  slot?: number;
  events: WorkerEvent[];
}
export interface NemesisEvent {
  ev: 'spawn' | 'kill' | 'stop' | 'cont' | 'exit';
  pid: number;
  at: number;
  [field: string]: unknown;
}
export interface ResourceEntry {
  token: string;
  pid: number;
  seq: number;
  at: number;
}
export interface History {
  workers: WorkerLog[];
  nemesis: NemesisEvent[];
  /** id → the writes the resource accepted, in its order */
  resource?: Record<string, ResourceEntry[]>;
  /** id → the final record */
  records?: Record<string, { owner: string; token: string }>;
}
export type Property = 'P1' | 'P2' | 'P3' | 'P4' | 'ERR';
export interface Violation {
  property: Property;
  message: string;
  [detail: string]: unknown;
}
export interface Figures {
  processes: number;
  transitions: number;
  acquires: number;
  takeovers: number;
  refreshes: number;
  renews: number;
  reclaims: number;
  releases: number;
  losses: number;
  kills: number;
  suspensions: number;
  writesAccepted: number;
  writesRejected: number;
  staleRejected: number;
  lateAccepted: number;
  killTakeovers: number;
  /** Acquires that were handed the lease by a release while waiting. */
  handoffs: number;
  killTakeoverP50Ms: number | undefined;
  killTakeoverP99Ms: number | undefined;
  violations: number;
}
export interface CheckResult {
  ok: boolean;
  figures: Figures;
  /** the first violations of each property (all are counted in byProperty) */
  violations: Violation[];
  byProperty: Record<Property, number>;
}
export function check(history: History): CheckResult;
export function parseLines(text: string, source?: string): WorkerEvent[];
export function formatFigures(figures: Figures): string;
