/**
 * Where cluster mode keeps its state in etcd, under the node's `--prefix` (default `/ticketing/`):
 * - `leader`: the leader's advertise address, bound to the leader's lease and created only if
 *   absent. Its create revision identifies one term of one leader: every write compares it.
 * - `keys/<key>`: one per granted key, `<token> <owner>` (both already wire-safe).
 * - `hwm`: a mark (decimal) that no committed token exceeds, reserved ahead (pipeline.ts). A new
 *   leader issues tokens above max(hwm, every stored token), so tokens keep increasing across
 *   leaders and full restarts.
 * Waiters are not stored: they live at the leader and are lost with it (their clients see
 * Indeterminate).
 */
import type { IKeyValue } from 'etcd3';
import { MAX_TOKEN, isName, isTokenText } from '../protocol.js';

export class KeyLayout {
  readonly leader: Buffer;
  readonly hwm: Buffer;
  readonly keysPrefix: string;
  readonly all: Buffer;
  /** The end of the range covering every key under the prefix. */
  readonly allEnd: Buffer;

  constructor(readonly prefix: string) {
    this.leader = Buffer.from(`${prefix}leader`, 'latin1');
    this.hwm = Buffer.from(`${prefix}hwm`, 'latin1');
    this.keysPrefix = `${prefix}keys/`;
    this.all = Buffer.from(prefix, 'latin1');
    this.allEnd = rangeEnd(this.all);
  }

  grantKey(key: string): Buffer {
    return Buffer.from(this.keysPrefix + key, 'latin1');
  }
}

export interface StoredGrant {
  readonly key: string;
  readonly owner: string;
  readonly token: bigint;
}

export function encodeGrant(token: bigint, owner: string): Buffer {
  return Buffer.from(`${token} ${owner}`, 'latin1');
}

/** Reads a range over the whole prefix: the grants and the high-water mark. Throws on anything
 * that is not ours (a foreign or corrupt value must stop a takeover, not be skipped). */
export function decodeSnapshot(layout: KeyLayout, kvs: readonly IKeyValue[]): { grants: StoredGrant[]; hwm: bigint } {
  const grants: StoredGrant[] = [];
  let hwm = 0n;
  const hwmName = layout.hwm.toString('latin1');
  for (const kv of kvs) {
    const name = kv.key.toString('latin1');
    const value = kv.value.toString('latin1');
    if (name === hwmName) {
      if (!isTokenText(value)) throw new Error(`etcd ${name}: not a token: ${JSON.stringify(value)}`);
      hwm = BigInt(value);
    } else if (name.startsWith(layout.keysPrefix)) {
      const key = name.slice(layout.keysPrefix.length);
      const [token, owner, extra] = value.split(' ');
      if (
        !isName(key) ||
        token === undefined ||
        !isTokenText(token) ||
        owner === undefined ||
        !isName(owner) ||
        extra !== undefined
      ) {
        throw new Error(`etcd ${name}: not a grant: ${JSON.stringify(value)}`);
      }
      grants.push({ key, owner, token: BigInt(token) });
    }
  }
  if (hwm > MAX_TOKEN) throw new Error('etcd hwm: beyond 2^64-1');
  return { grants, hwm };
}

/** etcd's "every key with this prefix" range end: the prefix with its last byte incremented. */
function rangeEnd(prefix: Buffer): Buffer {
  const end = Buffer.from(prefix);
  for (let i = end.length - 1; i >= 0; i--) {
    if (end[i]! < 0xff) {
      end[i]! += 1;
      return end.subarray(0, i + 1);
    }
  }
  return Buffer.from([0]);
}
