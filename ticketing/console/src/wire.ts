/**
 * What the server sends: the JSON of `GET /v1/node` and of the events of `GET /v1/locks/events`.
 * The server's side of this format is ticketing/src/observe/ (lock-rows.ts, node-status.ts,
 * lock-stream.ts); the page compiles apart from it (browser code), so the shapes are restated here.
 */

interface HolderRow {
  readonly owner: string;
  readonly token: string;
  /** Lease left when the row was sent, ms. */
  readonly expiresInMs: number;
  /** Its published value, if any. */
  readonly value?: string;
}

export interface KeyRow {
  readonly key: string;
  readonly kind: string;
  /** The key's rev, decimal. */
  readonly rev: string;
  readonly holders: readonly HolderRow[];
  readonly waiters: number;
  /** The first waiters' owners, front first. */
  readonly queue: readonly string[];
}

export interface NodeView {
  readonly role: 'single' | 'leader' | 'catching-up' | 'follower';
  readonly ready: boolean;
  readonly reason?: string;
  readonly self?: string;
  readonly leader?: string;
  readonly leaderConsole?: string;
  readonly etcd?: 'reachable' | 'unreachable' | 'unknown';
  readonly connections: number;
  readonly keys: number;
  readonly waiters: number;
  readonly leaseMs: number;
  readonly requestsPerSecond: readonly number[];
}

export interface SnapshotEvent {
  readonly prefix: string;
  readonly truncated: boolean;
  readonly node: NodeView;
  readonly keys: readonly KeyRow[];
}

export interface KeysEvent {
  readonly upsert: readonly KeyRow[];
  readonly remove: readonly string[];
  readonly truncated: boolean;
}
