/**
 * Keeps (`K <key> <token>`): the request, its replies (`K <token> <key> <lease_ms>` kept, `G <token>
 * <key>` gone) and the result they settle to. A keep is matched by (key, token), like a release,
 * and travels on the release lane.
 */
import { isTokenText } from '../protocol.js';

/** A keep the server confirmed. */
export interface KeepResult {
  readonly key: string;
  readonly token: bigint;
  /** The lease the server applied, ms (its `--lease`), counted from when it applied the keep. */
  readonly leaseMs: number;
  /** When the keep was sent (performance.now()): the server applied it no earlier. */
  readonly sentAt: number;
}

export function formatKeep(key: string, token: string): string {
  return `K ${key} ${token}\n`;
}

/** `K <token> <key> <lease_ms>` or `G <token> <key>` split by shape (the key is checked by the
 * match, as `splitReply` does for the other answers); undefined for anything else. */
export function splitKeepReply(
  line: string,
): { op: 'K'; token: string; key: string; leaseMs: number } | { op: 'G'; token: string; key: string } | undefined {
  const op = line[0];
  if ((op !== 'K' && op !== 'G') || line.charCodeAt(1) !== 32) return undefined;
  const fields = line.slice(2).split(' ');
  const [token, key, lease] = fields;
  if (token === undefined || !isTokenText(token) || key === undefined || key === '') return undefined;
  if (op === 'G') return fields.length === 2 ? { op, token, key } : undefined;
  if (fields.length !== 3 || lease === undefined || !/^[1-9][0-9]{0,9}$/.test(lease)) return undefined;
  return { op, token, key, leaseMs: Number(lease) };
}
