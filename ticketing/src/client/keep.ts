/** What a keep (`K <key> <token>`, protocol.ts) settles to when the server answers `K`. A keep is
 * matched by (key, token), like a release, and travels on the release lane. */
/** A keep the server confirmed. */
export interface KeepResult {
  readonly key: string;
  readonly token: bigint;
  /** The lease the server applied, ms (its `--lease`), counted from when it applied the keep. */
  readonly leaseMs: number;
  /** When the keep was sent (performance.now()): the server applied it no earlier. */
  readonly sentAt: number;
}
