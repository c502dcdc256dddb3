/**
 * Where cluster mode keeps its state in etcd, under the node's prefix: `leader` (the leader's
 * advertise address, bound to its etcd lease), `keys/<key>` (one per granted key, every holder:
 * `<token> <owner>` for one exclusive holder, the only form before modes; `s <token> <owner>…`
 * shared; `n<N> <token> <owner> <slot>…` a semaphore of N; in token order), led by `r<rev> `
 * (the key's rev; absent before election) and, for an exclusive holder that published one,
 * followed by a newline and its value)
 * and `hwm` (the token reservation: a decimal mark no committed token exceeds; the key keeps its
 * old name for compatibility). Its invariant: a snapshot decodes whole or not at all (a foreign or
 * corrupt value stops a takeover rather than be skipped). The layout and why it is safe:
 * docs/ticketing-cluster.md, "How it works" and "Tokens".
 */
import type { IKeyValue } from 'etcd3';
import { MAX_PERMITS, type LockMode } from '../modes.js';
import { isValue } from '../election-wire.js';
import { MAX_TOKEN, isName, isTokenText } from '../protocol.js';
import type { KeyView } from '../state-types.js';

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
  readonly mode: LockMode;
  /** A semaphore grant's slot; undefined otherwise. */
  readonly slot: number | undefined;
  /** The key's rev (0 when stored before election). */
  readonly rev: bigint;
  /** An exclusive grant's published value. */
  readonly value: string | undefined;
}

/** A key's grants as stored (see the header). */
export function encodeHolders(view: KeyView): Buffer {
  const { holders } = view;
  const only = holders[0]!;
  if (view.kind === 'lock' && !only.shared) {
    const value = only.value === undefined ? '' : `\n${only.value}`;
    return Buffer.from(`r${view.rev} ${only.token} ${only.owner}${value}`, 'latin1');
  }
  const fields = [`r${view.rev}`, view.kind === 'lock' ? 's' : `n${view.permits}`];
  for (const { token, owner, slot } of holders) {
    fields.push(String(token), owner);
    if (slot !== undefined) fields.push(String(slot));
  }
  return Buffer.from(fields.join(' '), 'latin1');
}

/** One stored value's grants, or undefined when it is not one. */
function decodeHolders(key: string, stored: string): StoredGrant[] | undefined {
  const newline = stored.indexOf('\n');
  const value = newline === -1 ? undefined : stored.slice(newline + 1);
  if (value !== undefined && !isValue(value)) return undefined;
  let fields = (newline === -1 ? stored : stored.slice(0, newline)).split(' ');
  let rev = 0n;
  if (/^r(?:0|[1-9][0-9]{0,19})$/.test(fields[0]!)) {
    rev = BigInt(fields[0]!.slice(1));
    if (rev > MAX_TOKEN) return undefined;
    fields = fields.slice(1);
  }
  const head = fields[0]!;
  const permits = /^n[1-9][0-9]{0,4}$/.test(head) ? Number(head.slice(1)) : 0;
  if (permits > MAX_PERMITS) return undefined;
  const mode: LockMode = head === 's' ? 's' : permits > 0 ? permits : 'x';
  const start = mode === 'x' ? 0 : 1;
  const width = permits > 0 ? 3 : 2;
  const count = (fields.length - start) / width;
  if (!Number.isInteger(count) || count < 1 || (mode === 'x' && count !== 1) || (permits > 0 && count > permits)) {
    return undefined;
  }
  if (value !== undefined && mode !== 'x') return undefined;
  const grants: StoredGrant[] = [];
  const slots = new Set<number>();
  for (let i = start; i < fields.length; i += width) {
    const [token, owner, slotText] = fields.slice(i, i + width) as [string, string, string | undefined];
    if (!isTokenText(token) || !isName(owner)) return undefined;
    let slot: number | undefined;
    if (permits > 0) {
      slot = Number(slotText);
      if (!/^(?:0|[1-9][0-9]*)$/.test(slotText!) || slot >= permits || slots.has(slot)) return undefined;
      slots.add(slot);
    }
    grants.push({ key, owner, token: BigInt(token), mode, slot, rev, value });
  }
  return grants;
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
      const stored = isName(key) ? decodeHolders(key, value) : undefined;
      if (stored === undefined) throw new Error(`etcd ${name}: not a grant: ${JSON.stringify(value)}`);
      grants.push(...stored);
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
