/** The etcd key layout and its decoding (no etcd needed: the values are what a range returns). */
import { describe, expect, it } from 'vitest';
import { KeyLayout, decodeSnapshot, encodeGrant } from '../../src/cluster/store.js';

const kv = (key: string, value: string) => ({ key: Buffer.from(key), value: Buffer.from(value) }) as never;

describe('cluster key layout', () => {
  const layout = new KeyLayout('/t/');

  it('names the leader, the token reservation (key `hwm`) and one key per grant under the prefix', () => {
    expect(layout.leader.toString()).toBe('/t/leader');
    expect(layout.reservation.toString()).toBe('/t/hwm');
    expect(layout.grantKey('orders').toString()).toBe('/t/keys/orders');
    expect(layout.allEnd.toString()).toBe('/t0'); // every key starting with /t/
    expect(encodeGrant(42n, 'w-1').toString()).toBe('42 w-1');
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
        { key: 'a', owner: 'w1', token: 7n },
        { key: 'b', owner: 'w2', token: 9n },
      ],
    });
  });

  it.each([
    ['a token that is not one', [kv('/t/keys/a', 'x w1')]],
    ['a missing owner', [kv('/t/keys/a', '7')]],
    ['an extra field', [kv('/t/keys/a', '7 w1 z')]],
    ['a bad reservation', [kv('/t/hwm', '-1')]],
    ['a token beyond 2^64-1', [kv('/t/keys/a', '18446744073709551616 w1')]],
  ])('refuses %s (a takeover must not skip what it cannot read)', (_, kvs) => {
    expect(() => decodeSnapshot(layout, kvs)).toThrow(/etcd \/t\//);
  });
});
