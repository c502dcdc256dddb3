// holdLease works over any backend that meets the port: here a third-party backend that is not
// one of the built-in classes (a plain object delegating to a MemoryLease), as a user would write.
import { describe, expect, test } from 'vitest';
import { holdLease, LeaseHeldError, MemoryLease, type LeaseGrant, type SessionLease } from '../src/index.js';
import { until } from './helpers/until.js';

function thirdParty(memory: MemoryLease): SessionLease & { renews: number } {
  const backend = {
    renews: 0,
    acquire: (id: string, owner: string, options?: { signal?: AbortSignal }) => memory.acquire(id, owner, options),
    renew: (grant: LeaseGrant, options?: { signal?: AbortSignal }) => {
      backend.renews++;
      return memory.renew(grant, options);
    },
    release: (grant: LeaseGrant, options?: { signal?: AbortSignal }) => memory.release(grant, options),
  };
  return backend;
}

describe('holdLease over a third-party backend', () => {
  test('renews every third of the grant lifetime by default, and release frees the id', async () => {
    const memory = new MemoryLease({ ttlMs: 300 });
    const backend = thirdParty(memory);
    const hold = await holdLease(backend, 's1', 'alice');
    await until(() => backend.renews >= 2, 'two renews');
    expect(hold.lost).toBe(false);
    expect(hold.grant.expiry.getTime()).toBeGreaterThan(Date.now());
    await expect(memory.acquire('s1', 'bob')).rejects.toBeInstanceOf(LeaseHeldError);
    await hold.release();
    expect(hold.signal.aborted).toBe(true);
    const bob = await memory.acquire('s1', 'bob');
    expect(bob.token).toBeGreaterThan(hold.grant.token);
  });

  test('aborts its signal with the LeaseHeldError when the backend reports a loss', async () => {
    let now = 1_000_000_000;
    const clock = (): number => now;
    const memory = new MemoryLease({ ttlMs: 30_000, clock });
    const backend = thirdParty(memory);
    const lost: unknown[] = [];
    const hold = await holdLease(backend, 's1', 'alice', { renewEveryMs: 20, clock, onLost: (e) => lost.push(e) });
    await until(() => backend.renews >= 1, 'a renew');
    now += 31_000; // alice's lease expires, and bob takes it over
    await memory.acquire('s1', 'bob');
    await until(() => hold.signal.aborted, 'the loss');
    expect(hold.lost).toBe(true);
    expect(hold.signal.reason).toBeInstanceOf(LeaseHeldError);
    expect(lost).toEqual([hold.signal.reason]);
  });

  test('bad options are refused before anything is acquired', async () => {
    const memory = new MemoryLease();
    await expect(holdLease(memory, 's1', 'alice', { renewEveryMs: 0 })).rejects.toThrow(RangeError);
    await expect(holdLease(memory, 's1', 'alice', { clock: 'now' as never })).rejects.toThrow(TypeError);
    await expect(memory.acquire('s1', 'bob')).resolves.toMatchObject({ owner: 'bob' });
  });
});
