// The conformance suite must catch backends that break the contract, not just pass good ones.
import { expect, test } from 'vitest';
import { runConformance } from '../src/conformance/index.js';
import { MemoryLease } from '../src/memory/memory-lease.js';
import { LeaseHeldError } from '../src/port/errors.js';
import type { LeaseGrant, OperationOptions, SessionLease } from '../src/port/types.js';

type Twist = (inner: MemoryLease, clock: () => number) => Partial<SessionLease>;

async function failuresOf(twist: Twist): Promise<string[]> {
  let now = Date.UTC(2026, 10, 29);
  const clock = (): number => now;
  const failures = await runConformance({
    ttlMs: 1_000,
    create: () => {
      const inner = new MemoryLease({ ttlMs: 1_000, clock });
      const overrides = twist(inner, clock);
      return {
        acquire: overrides.acquire ?? inner.acquire.bind(inner),
        renew: overrides.renew ?? inner.renew.bind(inner),
        release: overrides.release ?? inner.release.bind(inner),
      };
    },
    advance: (ms) => {
      now += ms;
    },
  });
  return failures.map((f) => f.name);
}

test('a faithful backend passes every case', async () => {
  expect(await failuresOf(() => ({}))).toEqual([]);
});

test('a backend that treats bare expiry as loss fails the reclaim case', async () => {
  const failures = await failuresOf((inner, clock) => ({
    renew: async (grant: LeaseGrant, options?: OperationOptions) => {
      if (grant.expiry.getTime() <= clock()) throw new LeaseHeldError('expired', grant.sessionId);
      return inner.renew(grant, options);
    },
  }));
  expect(failures).toContain('renew after a bare expiry reclaims the lease: same token, fresh expiry');
});

test('a backend that issues a new token on a same-owner re-acquire fails', async () => {
  const failures = await failuresOf((inner) => ({
    acquire: async (id: string, owner: string) => {
      const grant = await inner.acquire(id, owner);
      return Object.freeze({ ...grant, token: grant.token + 7n });
    },
  }));
  expect(failures).toContain('a same-owner re-acquire keeps the token');
});

test('a backend whose release frees whatever holds the id fails the idempotence case', async () => {
  const failures = await failuresOf((inner) => {
    const current = new Map<string, LeaseGrant>();
    return {
      acquire: async (id: string, owner: string) => {
        const grant = await inner.acquire(id, owner);
        current.set(id, grant);
        return grant;
      },
      release: async (grant: LeaseGrant) => inner.release(current.get(grant.sessionId) ?? grant),
    };
  });
  expect(failures).toContain('release is idempotent: unknown, stale, mismatched and repeated releases change nothing');
});

test('a backend that lets anyone take a held lease fails', async () => {
  let n = 0;
  const failures = await failuresOf((inner) => ({
    acquire: async (id: string, owner: string) =>
      inner.acquire(`${id}#${n++}`, owner).then((g) => Object.freeze({ ...g, sessionId: id })),
  }));
  expect(failures).toContain('a different owner gets LeaseHeldError while it is held');
});
