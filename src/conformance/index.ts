/**
 * The conformance suite for `SessionLease` backends: named async cases that throw on failure, for
 * any test framework. Third-party backends run it too:
 *
 *   for (const c of conformanceCases({ create, advance, ttlMs })) test(c.name, c.run);
 *
 * It checks errors by their stable `code`, so a backend may use its own error classes.
 */
import assert from 'node:assert/strict';
import type { LeaseGrant, SessionLease } from '../port/types.js';

export interface ConformanceTarget {
  /** A fresh backend (no leases yet) whose leases last `ttlMs`. */
  create(): SessionLease | Promise<SessionLease>;
  /** Moves the backend's clock forward by at least `ms`: a fake clock, or a real sleep. */
  advance(ms: number): void | Promise<void>;
  /** The lease length the created backends use. */
  readonly ttlMs: number;
  /** Cases this backend cannot meet, by name, each with the reason (documented by the backend).
   * A name that is not a case is an error, so a renamed case is never skipped by accident. */
  readonly skip?: Readonly<Record<string, string>> | undefined;
}

export interface ConformanceCase {
  readonly name: string;
  /** Why this backend skips the case (from `skip`); undefined: it runs. */
  readonly skipped?: string | undefined;
  run(): Promise<void>;
}

const HELD = 'ELEASEHELD';

async function rejectsWithCode(promise: Promise<unknown>, code: string, what: string): Promise<unknown> {
  let settled: unknown;
  try {
    settled = await promise;
  } catch (error) {
    assert.equal((error as { code?: unknown }).code, code, `${what}: expected code ${code}, got ${String(error)}`);
    return error;
  }
  assert.fail(`${what}: expected a rejection with code ${code}, but it resolved to ${String(settled)}`);
}

function assertGrant(grant: LeaseGrant, sessionId: string, owner: string): void {
  assert.equal(grant.sessionId, sessionId, 'grant.sessionId');
  assert.equal(grant.owner, owner, 'grant.owner');
  assert.equal(typeof grant.token, 'bigint', 'grant.token is a bigint');
  assert.ok(grant.token > 0n, 'grant.token is positive');
  assert.ok(grant.token < 1n << 64n, 'grant.token fits in a uint64');
  assert.ok(grant.expiry instanceof Date && !Number.isNaN(grant.expiry.getTime()), 'grant.expiry is a valid Date');
  assert.ok(Object.isFrozen(grant), 'grants are immutable');
}

export function conformanceCases(target: ConformanceTarget): ConformanceCase[] {
  const { ttlMs } = target;
  const pastExpiry = (): void | Promise<void> => target.advance(ttlMs + Math.max(20, ttlMs / 5));
  const cases: Record<string, (lease: SessionLease) => Promise<void>> = {
    async 'a fresh acquire succeeds'(lease) {
      assertGrant(await lease.acquire('s1', 'alice'), 's1', 'alice');
    },

    async 'renew extends the expiry and keeps the token'(lease) {
      const grant = await lease.acquire('s1', 'alice');
      await target.advance(Math.max(5, ttlMs / 4));
      const renewed = await lease.renew(grant);
      assertGrant(renewed, 's1', 'alice');
      assert.equal(renewed.token, grant.token, 'renew keeps the token');
      assert.ok(renewed.expiry > grant.expiry, 'renew moves the expiry forward');
      const again = await lease.renew(renewed);
      assert.equal(again.token, grant.token, 'a second renew keeps the token');
    },

    async 'release frees the lease for another owner, with a greater token'(lease) {
      const first = await lease.acquire('s1', 'alice');
      await lease.release(first);
      const second = await lease.acquire('s1', 'bob');
      assertGrant(second, 's1', 'bob');
      assert.ok(second.token > first.token, 'takeover after release gives a greater token');
    },

    async 'a different owner gets LeaseHeldError while it is held'(lease) {
      const first = await lease.acquire('s1', 'alice');
      await rejectsWithCode(lease.acquire('s1', 'bob'), HELD, 'acquire by another owner');
      const renewed = await lease.renew(first);
      assert.equal(renewed.token, first.token, 'the refused acquire changed nothing');
    },

    async 'a same-owner re-acquire keeps the token'(lease) {
      const first = await lease.acquire('s1', 'alice');
      await target.advance(Math.max(5, ttlMs / 4));
      const second = await lease.acquire('s1', 'alice');
      assert.equal(second.token, first.token, 'same token');
      assert.ok(second.expiry >= first.expiry, 'expiry not moved back');
      await lease.renew(second);
    },

    async 'a takeover after expiry gives a greater token'(lease) {
      const first = await lease.acquire('s1', 'alice');
      await pastExpiry();
      const second = await lease.acquire('s1', 'bob');
      assertGrant(second, 's1', 'bob');
      assert.ok(second.token > first.token, 'token strictly greater');
    },

    async 'renew after expiry and takeover is a loss, and leaves the new holder alone'(lease) {
      const first = await lease.acquire('s1', 'alice');
      await pastExpiry();
      const second = await lease.acquire('s1', 'bob');
      await rejectsWithCode(lease.renew(first), HELD, 'renew of the expired, taken-over lease');
      await rejectsWithCode(lease.acquire('s1', 'carol'), HELD, 'acquire while bob holds it');
      const renewed = await lease.renew(second);
      assert.equal(renewed.token, second.token, "bob's lease is untouched");
      await rejectsWithCode(lease.renew(first), HELD, 'a lost lease stays lost');
    },

    async 'renew after a bare expiry reclaims the lease: same token, fresh expiry'(lease) {
      const first = await lease.acquire('s1', 'alice');
      await pastExpiry();
      const reclaimed = await lease.renew(first);
      assert.equal(reclaimed.token, first.token, 'same token');
      assert.ok(reclaimed.expiry > first.expiry, 'fresh expiry');
      await rejectsWithCode(lease.acquire('s1', 'bob'), HELD, 'the reclaimed lease is held again');
    },

    async 'renew after release is a loss'(lease) {
      const grant = await lease.acquire('s1', 'alice');
      await lease.release(grant);
      await rejectsWithCode(lease.renew(grant), HELD, 'renew of a released lease');
    },

    async 'release is idempotent: unknown, stale, mismatched and repeated releases change nothing'(lease) {
      const unknown: LeaseGrant = Object.freeze({ sessionId: 'never', owner: 'alice', token: 42n, expiry: new Date() });
      await lease.release(unknown);
      const first = await lease.acquire('s1', 'alice');
      await lease.release(first);
      await lease.release(first); // already released
      const second = await lease.acquire('s1', 'bob');
      await lease.release(first); // stale: must not touch bob's generation
      await lease.release({ ...second, owner: 'alice' }); // right token, wrong owner
      await lease.release({ ...second, token: second.token + 1n }); // right owner, wrong token
      await rejectsWithCode(lease.acquire('s1', 'carol'), HELD, 'bob still holds it');
      const renewed = await lease.renew(second);
      assert.equal(renewed.token, second.token, "bob's token is unchanged");
      const fresh = await lease.acquire('never', 'dave');
      assertGrant(fresh, 'never', 'dave');
    },

    async 'tokens increase strictly across a chain of takeovers'(lease) {
      let previous = 0n;
      let grant = await lease.acquire('chain', 'owner-0');
      for (let round = 1; round <= 4; round++) {
        assert.ok(grant.token > previous, `round ${round}: ${grant.token} > ${previous}`);
        previous = grant.token;
        if (round % 2 === 0) await pastExpiry();
        else await lease.release(grant);
        grant = await lease.acquire('chain', `owner-${round}`);
      }
      assert.ok(grant.token > previous, 'last takeover');
    },

    async 'distinct ids are independent'(lease) {
      const a = await lease.acquire('s1', 'alice');
      const b = await lease.acquire('s2', 'bob');
      assertGrant(b, 's2', 'bob');
      await lease.release(a);
      await rejectsWithCode(lease.acquire('s2', 'carol'), HELD, 's2 is still held after s1 was released');
      const c = await lease.acquire('s1', 'carol');
      assertGrant(c, 's1', 'carol');
      assert.equal((await lease.renew(b)).token, b.token, 's2 keeps its token');
    },

    async 'bad arguments are rejected with TypeError and change nothing'(lease) {
      const grant = await lease.acquire('s1', 'alice');
      const bad: Array<[string, () => Promise<unknown>]> = [
        ['empty id', () => lease.acquire('', 'bob')],
        ['non-string id', () => lease.acquire(7 as unknown as string, 'bob')],
        ['empty owner', () => lease.acquire('s1', '')],
        ['non-string owner', () => lease.acquire('s1', null as unknown as string)],
        ['grant of the wrong shape', () => lease.renew({ ...grant, token: 1 as unknown as bigint })],
        ['grant without an owner', () => lease.release({ ...grant, owner: undefined as unknown as string })],
        ['grant that is not an object', () => lease.renew('grant' as unknown as LeaseGrant)],
      ];
      for (const [what, call] of bad) {
        await assert.rejects(call(), TypeError, what);
      }
      assert.equal((await lease.renew(grant)).token, grant.token, 'the lease is untouched');
    },

    async 'an aborted signal rejects with its reason and acquires nothing'(lease) {
      const reason = new Error('stop');
      await assert.rejects(
        lease.acquire('s1', 'alice', { signal: AbortSignal.abort(reason) }),
        (error) => error === reason,
      );
      const grant = await lease.acquire('s1', 'bob');
      assertGrant(grant, 's1', 'bob');
    },
  };
  const skip = target.skip ?? {};
  for (const name of Object.keys(skip)) {
    if (!(name in cases)) throw new RangeError(`skip: no conformance case is named ${JSON.stringify(name)}`);
  }
  return Object.entries(cases).map(([name, body]) => ({
    name,
    skipped: skip[name],
    run: async () => body(await target.create()),
  }));
}

/** Runs every case but the skipped ones; resolves to the failures (empty when the backend conforms). */
export async function runConformance(target: ConformanceTarget): Promise<Array<{ name: string; error: unknown }>> {
  const failures: Array<{ name: string; error: unknown }> = [];
  for (const c of conformanceCases(target)) {
    if (c.skipped !== undefined) continue;
    try {
      await c.run();
    } catch (error) {
      failures.push({ name: c.name, error });
    }
  }
  return failures;
}
