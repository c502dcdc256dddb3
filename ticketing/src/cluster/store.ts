/**
 * Where cluster mode keeps its state in etcd, under the node's prefix: `leader` (the leader's
 * advertise address, bound to its etcd lease), `keys/<key>` (`<token> <owner>`, one per grant)
 * and `hwm` (the token reservation: a decimal mark no committed token exceeds; the key keeps its
 * old name for compatibility). Its invariant: a snapshot decodes whole or not at all (a foreign or
 * corrupt value stops a takeover rather than be skipped). The layout and why it is safe:
 * docs/ticketing-cluster.md, "How it works" and "Tokens".
 */
import type { IKeyValue } from 'etcd3';
import { MAX_TOKEN, isName, isTokenText } from '../protocol.js';

export class KeyLayout {
  readonly leader: Buffer;
  /** The token reservation's key (named `hwm` in etcd). */
  readonly reservation: Buffer;
  readonly keysPrefix: string;
  readonly all: Buffer;
  /** The end of the range covering every key under the prefix. */
  readonly allEnd: Buffer;

  constructor(readonly prefix: string) {
    this.leader = Buffer.from(`${prefix}leader`, 'latin1');
    this.reservation = Buffer.from(`${prefix}hwm`, 'latin1');
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

/** Reads a range over the whole prefix: the grants and the token reservation (0 when absent).
 * Throws on anything that is not ours. */
export function decodeSnapshot(
  layout: KeyLayout,
  kvs: readonly IKeyValue[],
): { grants: StoredGrant[]; reservation: bigint } {
  const grants: StoredGrant[] = [];
  let reservation = 0n;
  const reservationName = layout.reservation.toString('latin1');
  for (const kv of kvs) {
    const name = kv.key.toString('latin1');
    const value = kv.value.toString('latin1');
    if (name === reservationName) {
      if (!isTokenText(value)) throw new Error(`etcd ${name}: not a token: ${JSON.stringify(value)}`);
      reservation = BigInt(value);
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
  if (reservation > MAX_TOKEN) throw new Error('etcd hwm: beyond 2^64-1');
  return { grants, reservation };
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
