/** A cluster node's options: defaults and bounds checked up front by the library (a RangeError or
 * TypeError naming the option), before any etcd call. The CLI's usage errors for the same bounds
 * are in lazy-etcd.test.ts. */
import { describe, expect, it } from 'vitest';
import { ClusterNode } from '../../src/cluster/node.js';
import { CLUSTER_DEFAULTS, checkLeaderTtlMs, checkPrefix, type ClusterNodeOptions } from '../../src/cluster/options.js';

const base: ClusterNodeOptions = {
  etcd: ['http://127.0.0.1:1'],
  advertise: '127.0.0.1:7',
  leaseMs: 30_000,
  maxKeys: 100,
  maxWaiters: 100,
  maxWaitersPerKey: 10,
};

describe('cluster node options', () => {
  it('defaults: prefix /ticketing/, a leader TTL of 2 s', () => {
    const node = new ClusterNode(base);
    expect(node.prefix).toBe('/ticketing/');
    expect(node.leaderTtlMs).toBe(2_000);
    expect(CLUSTER_DEFAULTS).toMatchObject({ prefix: '/ticketing/', leaderTtlMs: 2_000 });
  });

  it('the leader TTL: whole seconds from 1 s to 1 h', () => {
    for (const ms of [1_000, 2_000, 3_600_000])
      expect(new ClusterNode({ ...base, leaderTtlMs: ms }).leaderTtlMs).toBe(ms);
    for (const ms of [0, 500, 1_500, 3_601_000, 7_200_000, Number.NaN, Infinity]) {
      expect(() => new ClusterNode({ ...base, leaderTtlMs: ms })).toThrow(RangeError);
    }
    expect(() => new ClusterNode({ ...base, leaderTtlMs: 3_601_000 })).toThrow(
      'leaderTtlMs must be a whole number of seconds from 1s to 1h (etcd leases count whole seconds), got 3601000ms',
    );
    expect(() => new ClusterNode({ ...base, leaderTtlMs: '2s' as never })).toThrow(TypeError);
    expect(() => checkLeaderTtlMs(1_500, 'the leader TTL')).toThrow(/^the leader TTL must be/);
  });

  it('the prefix: 1-128 printable ASCII characters without spaces', () => {
    expect(new ClusterNode({ ...base, prefix: '/t/' }).prefix).toBe('/t/');
    expect(checkPrefix('p'.repeat(128))).toBe('p'.repeat(128));
    for (const prefix of ['', 'a b', 'p'.repeat(129), '/ü/']) {
      expect(() => new ClusterNode({ ...base, prefix })).toThrow(RangeError);
    }
    expect(() => new ClusterNode({ ...base, prefix: 7 as never })).toThrow(TypeError);
  });

  it('the commit window: an integer from 1 to 64', () => {
    for (const commitWindow of [1, 64]) expect(() => new ClusterNode({ ...base, commitWindow })).not.toThrow();
    for (const commitWindow of [0, 65, 1.5]) {
      expect(() => new ClusterNode({ ...base, commitWindow })).toThrow(RangeError);
    }
  });
});
