/** The etcd key layout and its decoding (no etcd needed: the values are what a range returns). */
import { describe, expect, it } from 'vitest';
import { KeyLayout, decodeSnapshot, encodeHolders } from '../../src/cluster/store.js';
import { TicketState } from '../../src/state.js';

const kv = (key: string, value: string) => ({ key: Buffer.from(key), value: Buffer.from(value) }) as never;

describe('cluster key layout', () => {
  const layout = new KeyLayout('/t/');

  it('names the leader, the token reservation (key `hwm`) and one key per grant under the prefix', () => {
    expect(layout.leader.toString()).toBe('/t/leader');
    expect(layout.reservation.toString()).toBe('/t/hwm');
    expect(layout.grantKey('orders').toString()).toBe('/t/keys/orders');
    expect(layout.allEnd.toString()).toBe('/t0'); // every key starting with /t/
  });

  it('decodes grants and the token reservation, ignoring the leader key', () => {
    const snapshot = decodeSnapshot(layout, [
      kv('/t/leader', '127.0.0.1:7000'),
      kv('/t/hwm', '99'),
      kv('/t/keys/a', '7 w1'),
      kv('/t/keys/b', '9 w2'),
    ]);
    expect(snapshot).toEqual({
      reservation: 99n,
      grants: [
        { key: 'a', owner: 'w1', token: 7n, mode: 'x', slot: undefined, rev: 0n, value: undefined },
        { key: 'b', owner: 'w2', token: 9n, mode: 'x', slot: undefined, rev: 0n, value: undefined },
      ],
    });
  });

  it.each([
    ['a token that is not one', [kv('/t/keys/a', 'x w1')]],
    ['a missing owner', [kv('/t/keys/a', '7')]],
    ['an extra field', [kv('/t/keys/a', '7 w1 z')]],
    ['a bad reservation', [kv('/t/hwm', '-1')]],
    ['a token beyond 2^64-1', [kv('/t/keys/a', '18446744073709551616 w1')]],
    ['shared without holders', [kv('/t/keys/a', 's')]],
    ['a shared holder without owner', [kv('/t/keys/a', 's 7 w1 8')]],
    ['a slot out of range', [kv('/t/keys/a', 'n2 7 w1 2')]],
    ['a slot twice', [kv('/t/keys/a', 'n2 7 w1 0 8 w2 0')]],
    ['more holders than N', [kv('/t/keys/a', 'n1 7 w1 0 8 w2 1')]],
    ['N beyond 65535', [kv('/t/keys/a', 'n65536 7 w1 0')]],
    ['a semaphore holder without slot', [kv('/t/keys/a', 'n2 7 w1')]],
    ['a rev that is not one', [kv('/t/keys/a', 'r07 7 w1')]],
    ['a rev beyond 2^64-1', [kv('/t/keys/a', 'r18446744073709551616 7 w1')]],
    ['a value of a shared key', [kv('/t/keys/a', 'r9 s 7 w1\nv')]],
    ['an empty value', [kv('/t/keys/a', 'r9 7 w1\n')]],
    ['a value with a control byte', [kv('/t/keys/a', 'r9 7 w1\na\tb')]],
  ])('refuses %s (a takeover must not skip what it cannot read)', (_, kvs) => {
    expect(() => decodeSnapshot(layout, kvs)).toThrow(/etcd \/t\//);
  });
});

describe('modes in etcd', () => {
  const layout = new KeyLayout('/t/');
  it('a stored key leads with its rev; an exclusive holder ends with its value; shared and semaphore keys store every holder', () => {
    const state = new TicketState({ leaseMs: 1000, expiry: 'eager' });
    const at = 1_800_000_000_000;
    const acquire = (key: string, owner: string, mode: 'x' | 's' | number) =>
      state.apply({ type: 'acquire', session: 1, key, owner, waitMs: 0, mode }, at);
    acquire('x', 'w', 'x');
    const token = state.get('x')!.token;
    state.apply({ type: 'publish', session: 1, key: 'x', token, value: '10.0.0.5:8080 a b' }, at);
    acquire('doc', 'r1', 's');
    acquire('doc', 'r2', 's');
    acquire('gpu', 'g1', 4);
    acquire('gpu', 'g2', 4);
    const stored = ['x', 'doc', 'gpu'].map((key) => kv(`/t/keys/${key}`, encodeHolders(state.get(key)!).toString()));
    const [x, doc, gpu] = stored.map((e: { value: Buffer }) => e.value.toString());
    const t = (key: string, i: number) => state.get(key)!.holders[i]!.token;
    const rev = (key: string) => state.get(key)!.rev;
    expect(x).toBe(`r${rev('x')} ${t('x', 0)} w\n10.0.0.5:8080 a b`);
    expect(doc).toBe(`r${rev('doc')} s ${t('doc', 0)} r1 ${t('doc', 1)} r2`);
    expect(gpu).toBe(`r${rev('gpu')} n4 ${t('gpu', 0)} g1 0 ${t('gpu', 1)} g2 1`);
    // Read back and adopted by a new leader: the same holders, kinds, slots and value; revs no lower.
    const { grants } = decodeSnapshot(layout, stored);
    const next = new TicketState({ leaseMs: 1000, expiry: 'eager' });
    for (const { key, owner, token, mode, slot, rev, value } of grants)
      next.apply({ type: 'adopt', key, owner, token, mode, slot, rev, value }, at);
    for (const key of ['x', 'doc', 'gpu']) {
      const strip = (view: ReturnType<TicketState['get']>) =>
        view!.holders.map(({ owner, token, shared, slot, value }) => ({ owner, token, shared, slot, value }));
      expect(strip(next.get(key))).toEqual(strip(state.get(key)));
      expect(next.get(key)!.kind).toBe(state.get(key)!.kind);
      expect(next.get(key)!.rev).toBeGreaterThanOrEqual(rev(key));
    }
    expect(next.lastToken).toBeGreaterThanOrEqual(rev('gpu'));
  });
});
