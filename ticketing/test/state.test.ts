/** The lock table as a pure state machine: every row of the two tables, expiry, tokens, limits,
 * determinism. Time is a number passed in; nothing here sleeps. */
import { describe, expect, test } from 'vitest';
import { MAX_TOKEN } from '../src/protocol.js';
import type { Command, Effect } from '../src/state-types.js';
import { TicketState } from '../src/state.js';

const T0 = 1_800_000_000_000; // epoch ms
const LEASE = 1_000;

const acquire = (session: number, key: string, owner: string, waitMs = 0): Command => ({
  type: 'acquire',
  session,
  key,
  owner,
  waitMs,
});
const release = (session: number, key: string, token: bigint): Command => ({ type: 'release', session, key, token });
const keep = (session: number, key: string, token: bigint): Command => ({ type: 'keep', session, key, token });
const adopt = (key: string, owner: string, token: bigint): Command => ({ type: 'adopt', key, owner, token });
const restart = (key: string, token: bigint, slackMs?: number): Command => ({
  type: 'restart-lease',
  key,
  token,
  slackMs,
});

/** Effects that answer a request (what goes on the wire). */
const replies = (effects: Effect[]): Effect[] =>
  effects.filter((e) => ['granted', 'timed-out', 'busy', 'released', 'not-released', 'kept', 'gone'].includes(e.type));

function granted(effects: Effect[]): Extract<Effect, { type: 'granted' }> {
  const grant = effects.find((e) => e.type === 'granted');
  if (grant === undefined || grant.type !== 'granted')
    throw new Error(`no grant in ${JSON.stringify(effects, (_, v: unknown) => (typeof v === 'bigint' ? `${v}n` : v))}`);
  return grant;
}

describe('acquire table', () => {
  test('not registered: registered with expiry now+lease and a new token, A at once', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const effects = state.apply(acquire(1, 'k', 'o1'), T0);
    expect(effects).toEqual([
      {
        type: 'granted',
        session: 1,
        key: 'k',
        owner: 'o1',
        token: expect.any(BigInt) as unknown,
        expiresAt: T0 + LEASE,
        path: 'free',
        mode: 'x',
        slot: undefined,
        requestedAt: T0,
      },
    ]);
    const view = state.get('k')!;
    expect(view).toMatchObject({ owner: 'o1', grantedAt: T0, expiresAt: T0 + LEASE, waiters: [] });
    expect(view.token).toBe(granted(effects).token);
  });

  test('registered and expired: taken over at once with a new token and a new expiry', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const first = granted(state.apply(acquire(1, 'k', 'o1'), T0));
    const effects = state.apply(acquire(2, 'k', 'o2'), T0 + LEASE);
    expect(effects[0]).toEqual({ type: 'expired', key: 'k', owner: 'o1', token: first.token });
    const second = granted(effects);
    expect(second).toMatchObject({ session: 2, owner: 'o2', path: 'takeover', expiresAt: T0 + 2 * LEASE });
    expect(second.token).toBeGreaterThan(first.token);
  });

  test('registered, valid holder, wait 0: nothing changes, T at once', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const first = granted(state.apply(acquire(1, 'k', 'o1'), T0));
    expect(state.apply(acquire(2, 'k', 'o2', 0), T0 + 10)).toEqual([
      { type: 'timed-out', session: 2, key: 'k', owner: 'o2', reason: 'held' },
    ]);
    expect(state.get('k')).toMatchObject({ owner: 'o1', token: first.token, waiters: [] });
  });

  test('registered, valid holder, wait > 0: queued at the back, reply held; T when the wait runs out', () => {
    const state = new TicketState({ leaseMs: LEASE });
    state.apply(acquire(1, 'k', 'o1'), T0);
    const queued = state.apply(acquire(2, 'k', 'o2', 300), T0 + 10);
    expect(queued).toEqual([
      {
        type: 'queued',
        session: 2,
        key: 'k',
        owner: 'o2',
        waiter: expect.any(Number) as unknown,
        deadline: T0 + 310,
        position: 1,
      },
    ]);
    expect(replies(queued)).toEqual([]);
    state.apply(acquire(3, 'k', 'o3', 500), T0 + 20);
    expect(state.get('k')!.waiters.map((w) => w.owner)).toEqual(['o2', 'o3']);
    // Nothing is due before the first deadline.
    expect(state.nextDeadline()).toBe(T0 + 310);
    expect(state.nextDue(T0 + 309)).toBeUndefined();
    const due = state.nextDue(T0 + 310)!;
    expect(due).toMatchObject({ type: 'wait-timeout', key: 'k' });
    expect(state.apply(due, T0 + 310)).toEqual([
      { type: 'timed-out', session: 2, key: 'k', owner: 'o2', reason: 'waited' },
    ]);
    expect(state.get('k')!.waiters.map((w) => w.owner)).toEqual(['o3']);
  });

  test('a queued request gets A on the release hand-off', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const first = granted(state.apply(acquire(1, 'k', 'o1'), T0));
    state.apply(acquire(2, 'k', 'o2', 5_000), T0 + 1);
    const effects = state.apply(release(1, 'k', first.token), T0 + 100);
    expect(effects[0]).toEqual({ type: 'released', session: 1, key: 'k', token: first.token });
    const handed = granted(effects);
    // requestedAt is when it was queued: the wait from its arrival to its grant was 99 ms.
    expect(handed).toMatchObject({
      session: 2,
      owner: 'o2',
      path: 'handoff',
      expiresAt: T0 + 100 + LEASE,
      requestedAt: T0 + 1,
    });
    expect(handed.token).toBeGreaterThan(first.token);
  });

  test('caps: per-key queue, total waiters and total keys answer B and do not queue or register', () => {
    const state = new TicketState({ leaseMs: LEASE, maxWaitersPerKey: 1, maxWaiters: 2, maxKeys: 3 });
    state.apply(acquire(1, 'a', 'h'), T0);
    state.apply(acquire(1, 'b', 'h'), T0);
    expect(replies(state.apply(acquire(2, 'a', 'w1', 100), T0))).toEqual([]);
    expect(state.apply(acquire(2, 'a', 'w2', 100), T0)).toEqual([
      { type: 'busy', session: 2, key: 'a', owner: 'w2', limit: 'waiters-per-key' },
    ]);
    expect(replies(state.apply(acquire(2, 'b', 'w3', 100), T0))).toEqual([]);
    state.apply(acquire(1, 'c', 'h'), T0);
    expect(state.apply(acquire(2, 'c', 'w4', 100), T0)).toEqual([
      { type: 'busy', session: 2, key: 'c', owner: 'w4', limit: 'waiters' },
    ]);
    expect(state.apply(acquire(2, 'd', 'h'), T0)).toEqual([
      { type: 'busy', session: 2, key: 'd', owner: 'h', limit: 'keys' },
    ]);
    expect(state.get('d')).toBeUndefined();
    expect(state.waiterCount).toBe(2);
    expect(state.keyCount).toBe(3);
  });

  test('a cap of 0 waiters means "never queue": B instead of waiting', () => {
    const state = new TicketState({ leaseMs: LEASE, maxWaitersPerKey: 0 });
    state.apply(acquire(1, 'a', 'h'), T0);
    expect(state.apply(acquire(2, 'a', 'w', 100), T0)).toEqual([
      { type: 'busy', session: 2, key: 'a', owner: 'w', limit: 'waiters-per-key' },
    ]);
  });

  test("the owner gives no authority: the holder's owner gets no token back and no renewal", () => {
    const state = new TicketState({ leaseMs: LEASE });
    const first = granted(state.apply(acquire(1, 'k', 'same'), T0));
    expect(state.apply(acquire(1, 'k', 'same', 0), T0 + 500)).toEqual([
      { type: 'timed-out', session: 1, key: 'k', owner: 'same', reason: 'held' },
    ]);
    expect(state.get('k')).toMatchObject({ token: first.token, expiresAt: T0 + LEASE });
    // With a wait it queues behind itself like anyone else.
    expect(state.apply(acquire(1, 'k', 'same', 100), T0 + 500)[0]).toMatchObject({ type: 'queued', position: 1 });
  });
});

describe('release table', () => {
  test('token matches, waiters: handed to the front waiter with a new token, R', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const first = granted(state.apply(acquire(1, 'k', 'o1'), T0));
    state.apply(acquire(2, 'k', 'o2', 1_000), T0);
    state.apply(acquire(3, 'k', 'o3', 1_000), T0);
    const effects = state.apply(release(1, 'k', first.token), T0 + 5);
    expect(replies(effects).map((e) => e.type)).toEqual(['released', 'granted']);
    expect(granted(effects).owner).toBe('o2');
    expect(state.get('k')!.waiters.map((w) => w.owner)).toEqual(['o3']);
  });

  test('token matches, no waiters: the key is deleted, R', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const first = granted(state.apply(acquire(1, 'k', 'o1'), T0));
    expect(state.apply(release(1, 'k', first.token), T0 + 5)).toEqual([
      { type: 'released', session: 1, key: 'k', token: first.token },
    ]);
    expect(state.get('k')).toBeUndefined();
    expect(state.keyCount).toBe(0);
  });

  test('token mismatch: nothing changes, N', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const first = granted(state.apply(acquire(1, 'k', 'o1'), T0));
    expect(state.apply(release(2, 'k', first.token + 1n), T0 + 5)).toEqual([
      { type: 'not-released', session: 2, key: 'k', token: first.token + 1n, reason: 'token-mismatch' },
    ]);
    expect(state.get('k')).toMatchObject({ owner: 'o1', token: first.token });
  });

  test('not registered: nothing, N', () => {
    const state = new TicketState({ leaseMs: LEASE });
    expect(state.apply(release(1, 'nope', 7n), T0)).toEqual([
      { type: 'not-released', session: 1, key: 'nope', token: 7n, reason: 'not-registered' },
    ]);
  });

  test('an expired but unswept key is released by its exact token: R, not N', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const first = granted(state.apply(acquire(1, 'k', 'o1'), T0));
    expect(state.apply(release(1, 'k', first.token), T0 + 3 * LEASE)[0]).toMatchObject({ type: 'released' });
  });

  test('after the sweep the same release gets N', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const first = granted(state.apply(acquire(1, 'k', 'o1'), T0));
    const swept = state.apply({ type: 'sweep' }, T0 + LEASE);
    expect(swept).toContainEqual({ type: 'expired', key: 'k', owner: 'o1', token: first.token });
    expect(swept.at(-1)).toEqual({ type: 'swept', visited: 1, removed: 1, done: true });
    expect(state.apply(release(1, 'k', first.token), T0 + LEASE)[0]).toMatchObject({
      type: 'not-released',
      reason: 'not-registered',
    });
  });
});

describe('keep table', () => {
  test('held under exactly that token, not expired: the expiry becomes now + lease, K', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const { token } = granted(state.apply(acquire(1, 'k', 'o1'), T0));
    expect(state.apply(keep(2, 'k', token), T0 + 600)).toEqual([
      { type: 'kept', session: 2, key: 'k', owner: 'o1', token, expiresAt: T0 + 600 + LEASE, leaseMs: LEASE },
    ]);
    expect(state.get('k')).toMatchObject({ owner: 'o1', token, grantedAt: T0, expiresAt: T0 + 600 + LEASE });
    // Kept past its first lease: still held, an acquire gets T, the holder's release gets R.
    expect(replies(state.apply(acquire(3, 'k', 'o2'), T0 + LEASE + 500))).toEqual([
      { type: 'timed-out', session: 3, key: 'k', owner: 'o2', reason: 'held' },
    ]);
    expect(state.apply({ type: 'sweep' }, T0 + LEASE + 500)).toEqual([
      { type: 'swept', visited: 1, removed: 0, done: true },
    ]);
    expect(state.apply(release(1, 'k', token), T0 + LEASE + 550)[0]).toMatchObject({ type: 'released' });
  });

  test('a keep never moves the expiry earlier', () => {
    const state = new TicketState({ leaseMs: LEASE, expiry: 'eager' });
    const { token } = granted(state.apply(acquire(1, 'k', 'o1'), T0));
    state.apply(restart('k', token), T0 + 100);
    expect(state.apply(keep(1, 'k', token), T0 + 50)[0]).toMatchObject({ type: 'kept', expiresAt: T0 + 100 + LEASE });
    expect(state.nextDeadline()).toBe(T0 + 100 + LEASE);
  });

  test('the whole-ms lease is reported, rounded down', () => {
    const state = new TicketState({ leaseMs: 1000.7 });
    const { token } = granted(state.apply(acquire(1, 'k', 'o1'), T0));
    expect(state.apply(keep(1, 'k', token), T0)[0]).toMatchObject({ type: 'kept', leaseMs: 1000 });
  });

  test.each([
    ['never granted', 'not-registered'],
    ['released', 'not-registered'],
    ['taken over after expiry', 'token-mismatch'],
    ['handed to a waiter', 'token-mismatch'],
    ['another token', 'token-mismatch'],
    ['expired, not yet swept (single mode)', 'expired'],
    ['expired at exactly its deadline', 'expired'],
    ['swept', 'not-registered'],
  ] as const)('%s: G, and nothing changes', (path, reason) => {
    const state = new TicketState({ leaseMs: LEASE });
    const { token } = granted(state.apply(acquire(1, 'k', 'o1'), T0));
    let at = T0 + 10;
    let asked = token;
    switch (path) {
      case 'never granted':
        asked = 7n;
        state.apply(release(1, 'k', token), at);
        break;
      case 'released':
        state.apply(release(1, 'k', token), at);
        break;
      case 'taken over after expiry':
        granted(state.apply(acquire(2, 'k', 'o2'), (at = T0 + LEASE + 1)));
        break;
      case 'handed to a waiter':
        state.apply(acquire(2, 'k', 'o2', 5_000), T0);
        granted(state.apply(release(1, 'k', token), at));
        break;
      case 'another token':
        asked = token + 1n;
        break;
      case 'expired, not yet swept (single mode)':
        at = T0 + 2 * LEASE;
        break;
      case 'expired at exactly its deadline':
        at = T0 + LEASE;
        break;
      case 'swept':
        state.apply({ type: 'sweep' }, (at = T0 + LEASE));
        break;
    }
    const before = state.get('k');
    const waiters = state.waiterCount;
    const deadline = state.nextDeadline();
    expect(state.apply(keep(3, 'k', asked), at)).toEqual([
      { type: 'gone', session: 3, key: 'k', token: asked, reason },
    ]);
    expect(state.get('k')).toEqual(before);
    expect(state.waiterCount).toBe(waiters);
    expect(state.nextDeadline()).toBe(deadline);
  });

  test("the owner is no authority: a keep with the holder's owner but not its token is G", () => {
    const state = new TicketState({ leaseMs: LEASE });
    const { token } = granted(state.apply(acquire(1, 'k', 'same'), T0));
    // There is no owner in a K at all; only the exact token counts, whatever session sends it.
    expect(state.apply(keep(1, 'k', token - 1n), T0 + 1)[0]).toMatchObject({ type: 'gone' });
    expect(state.apply(keep(9, 'k', token), T0 + 1)[0]).toMatchObject({ type: 'kept', session: 9 });
  });

  test('a kept key with waiters: its deadline moves in the heap, the waiter gets it only at the new expiry', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const first = granted(state.apply(acquire(1, 'k', 'o1'), T0));
    state.apply(acquire(2, 'k', 'o2', 10_000), T0 + 10);
    expect(state.nextDeadline()).toBe(T0 + LEASE);
    state.apply(keep(1, 'k', first.token), T0 + 700);
    expect(state.nextDeadline()).toBe(T0 + 700 + LEASE);
    expect(state.nextDue(T0 + LEASE)).toBeUndefined();
    // A stale expire for the old deadline changes nothing.
    expect(state.apply({ type: 'expire', key: 'k', token: first.token }, T0 + LEASE)).toEqual([]);
    const due = state.nextDue(T0 + 700 + LEASE)!;
    expect(due).toEqual({ type: 'expire', key: 'k', token: first.token });
    const handed = state.apply(due, T0 + 700 + LEASE);
    expect(granted(handed)).toMatchObject({ owner: 'o2', path: 'expiry' });
  });

  test('keeps do not touch the queue: waiters stay in order, positions unchanged', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const { token } = granted(state.apply(acquire(1, 'k', 'o1'), T0));
    state.apply(acquire(2, 'k', 'o2', 5_000), T0);
    state.apply(acquire(3, 'k', 'o3', 5_000), T0);
    const queue = state.get('k')!.waiters;
    state.apply(keep(1, 'k', token), T0 + 100);
    expect(state.get('k')!.waiters).toEqual(queue);
    expect(state.apply(release(1, 'k', token), T0 + 200).map((e) => e.type)).toEqual(['released', 'granted']);
    expect(state.get('k')!.owner).toBe('o2');
  });
});

describe('hand-off and expiry', () => {
  test('release hands off FIFO: each waiter in arrival order, no re-contention', () => {
    const state = new TicketState({ leaseMs: LEASE });
    let holder = granted(state.apply(acquire(0, 'k', 'o0'), T0));
    for (let i = 1; i <= 5; i++) state.apply(acquire(i, 'k', `o${i}`, 10_000), T0 + i);
    const order: string[] = [];
    for (let i = 1; i <= 5; i++) {
      // A newcomer with wait 0 never jumps the queue while the key is held.
      expect(state.apply(acquire(99, 'k', 'newcomer', 0), T0 + 10 * i)[0]).toMatchObject({ type: 'timed-out' });
      const next = granted(state.apply(release(holder.session, 'k', holder.token), T0 + 10 * i));
      expect(next.token).toBeGreaterThan(holder.token);
      order.push(next.owner);
      holder = next;
    }
    expect(order).toEqual(['o1', 'o2', 'o3', 'o4', 'o5']);
  });

  test('expiry is the only non-FIFO path: an acquire that finds the key expired takes it ahead of waiters', () => {
    const state = new TicketState({ leaseMs: LEASE });
    state.apply(acquire(1, 'k', 'o1'), T0);
    state.apply(acquire(2, 'k', 'waiter', 60_000), T0 + 1);
    const effects = state.apply(acquire(3, 'k', 'late', 0), T0 + LEASE);
    expect(granted(effects)).toMatchObject({ owner: 'late', path: 'takeover', requestedAt: T0 + LEASE });
    expect(state.get('k')!.waiters.map((w) => w.owner)).toEqual(['waiter']);
  });

  test('a key that expires with waiters goes to the front waiter at its expiry', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const first = granted(state.apply(acquire(1, 'k', 'o1'), T0));
    state.apply(acquire(2, 'k', 'o2', 60_000), T0 + 1);
    state.apply(acquire(3, 'k', 'o3', 60_000), T0 + 2);
    expect(state.nextDeadline()).toBe(T0 + LEASE);
    expect(state.nextDue(T0 + LEASE - 1)).toBeUndefined();
    const due = state.nextDue(T0 + LEASE)!;
    expect(due).toEqual({ type: 'expire', key: 'k', token: first.token });
    const effects = state.apply(due, T0 + LEASE);
    expect(effects[0]).toEqual({ type: 'expired', key: 'k', owner: 'o1', token: first.token });
    expect(granted(effects)).toMatchObject({
      owner: 'o2',
      path: 'expiry',
      expiresAt: T0 + 2 * LEASE,
      requestedAt: T0 + 1,
    });
    // The next expiry is now scheduled for the new holder (o3 still waits).
    expect(state.nextDeadline()).toBe(T0 + 2 * LEASE);
  });

  test('expire is token-guarded and time-guarded: a stale or early expire changes nothing', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const first = granted(state.apply(acquire(1, 'k', 'o1'), T0));
    state.apply(acquire(2, 'k', 'o2', 60_000), T0);
    expect(state.apply({ type: 'expire', key: 'k', token: first.token }, T0 + LEASE - 1)).toEqual([]);
    expect(state.apply({ type: 'expire', key: 'k', token: first.token + 5n }, T0 + LEASE)).toEqual([]);
    expect(state.apply({ type: 'expire', key: 'other', token: first.token }, T0 + LEASE)).toEqual([]);
    expect(state.get('k')).toMatchObject({ owner: 'o1', token: first.token });
  });

  test('a hand-off skips waiters whose wait already ran out (they get T)', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const first = granted(state.apply(acquire(1, 'k', 'o1'), T0));
    state.apply(acquire(2, 'k', 'short', 10), T0);
    state.apply(acquire(3, 'k', 'long', 10_000), T0);
    const effects = state.apply(release(1, 'k', first.token), T0 + 50);
    expect(replies(effects)).toEqual([
      { type: 'released', session: 1, key: 'k', token: first.token },
      { type: 'timed-out', session: 2, key: 'k', owner: 'short', reason: 'waited' },
      expect.objectContaining({ type: 'granted', owner: 'long' }),
    ]);
  });

  test('the key is deleted when its expiry finds no waiter left to hand it to', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const first = granted(state.apply(acquire(1, 'k', 'o1'), T0));
    state.apply(acquire(2, 'k', 'o2', 5_000), T0);
    const effects = state.apply({ type: 'expire', key: 'k', token: first.token }, T0 + 10 * LEASE);
    expect(replies(effects)).toEqual([{ type: 'timed-out', session: 2, key: 'k', owner: 'o2', reason: 'waited' }]);
    expect(state.get('k')).toBeUndefined();
    expect(state.nextDeadline()).toBeUndefined();
  });

  test('the sweep removes expired keys without waiters only, in bounded slices', () => {
    const state = new TicketState({ leaseMs: LEASE });
    for (let i = 0; i < 25; i++) state.apply(acquire(1, `k${i}`, 'o'), T0);
    state.apply(acquire(1, 'fresh', 'o'), T0 + LEASE);
    state.apply(acquire(2, 'k0', 'w', 60_000), T0); // k0 has a waiter: handed off, never swept
    let effects: Effect[];
    let slices = 0;
    do {
      effects = state.apply({ type: 'sweep', limit: 10 }, T0 + LEASE);
      slices++;
    } while (effects.at(-1)?.type === 'swept' && !(effects.at(-1) as { done: boolean }).done);
    expect(slices).toBe(3);
    expect(state.keyCount).toBe(2);
    expect(state.get('fresh')).toBeDefined();
    expect(state.get('k0')).toBeDefined();
  });

  test("disconnect removes the session's waiters (dropped, or answered T when notified)", () => {
    const state = new TicketState({ leaseMs: LEASE });
    const first = granted(state.apply(acquire(1, 'k', 'h'), T0));
    state.apply(acquire(2, 'k', 'gone', 10_000), T0);
    state.apply(acquire(3, 'k', 'stays', 10_000), T0);
    state.apply(acquire(2, 'k2', 'h2'), T0);
    expect(state.apply({ type: 'disconnect', session: 2 }, T0 + 1)).toEqual([
      { type: 'abandoned', session: 2, key: 'k', owner: 'gone', waiter: expect.any(Number) as unknown },
    ]);
    // What session 2 holds stays held: grants are leases, not connections.
    expect(state.get('k2')).toMatchObject({ owner: 'h2' });
    expect(granted(state.apply(release(1, 'k', first.token), T0 + 2)).owner).toBe('stays');
    state.apply(acquire(4, 'k', 'w4', 10_000), T0 + 3);
    expect(state.apply({ type: 'disconnect', session: 4, notify: true }, T0 + 4)).toEqual([
      { type: 'timed-out', session: 4, key: 'k', owner: 'w4', reason: 'cancelled' },
    ]);
    expect(state.waiterCount).toBe(0);
  });

  test('a stale wait-timeout (the waiter was granted or is not yet due) changes nothing', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const first = granted(state.apply(acquire(1, 'k', 'h'), T0));
    const queued = state.apply(acquire(2, 'k', 'w', 100), T0)[0] as Extract<Effect, { type: 'queued' }>;
    expect(state.apply({ type: 'wait-timeout', key: 'k', waiter: queued.waiter }, T0 + 99)).toEqual([]);
    state.apply(release(1, 'k', first.token), T0 + 50);
    expect(state.apply({ type: 'wait-timeout', key: 'k', waiter: queued.waiter }, T0 + 100)).toEqual([]);
    expect(state.get('k')!.owner).toBe('w');
  });
});

describe('tokens', () => {
  test('strictly increasing across the whole server, and at least the wall clock in µs', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const tokens: bigint[] = [];
    for (let i = 0; i < 50; i++) tokens.push(granted(state.apply(acquire(1, `k${i % 3}-${i}`, 'o'), T0)).token);
    expect(tokens[0]).toBe(BigInt(T0) * 1000n);
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!).toBe(true);
    // The clock moving on carries tokens with it; a clock stepping back does not.
    expect(granted(state.apply(acquire(1, 'later', 'o'), T0 + 1_000)).token).toBe(BigInt(T0 + 1_000) * 1000n);
    const before = state.lastToken;
    expect(granted(state.apply(acquire(1, 'earlier', 'o'), T0 - 60_000)).token).toBe(before + 1n);
  });

  test('a restart floor (lastToken) is exceeded even with the clock far behind', () => {
    const floor = BigInt(T0 + 3_600_000) * 1000n;
    const state = new TicketState({ leaseMs: LEASE, lastToken: floor });
    expect(granted(state.apply(acquire(1, 'k', 'o'), T0)).token).toBe(floor + 1n);
  });

  test('2^64-1 is the last token: after it, acquires that need a token get B', () => {
    const state = new TicketState({ leaseMs: LEASE, lastToken: MAX_TOKEN - 1n });
    const last = granted(state.apply(acquire(1, 'a', 'o'), T0));
    expect(last.token).toBe(MAX_TOKEN);
    expect(state.apply(acquire(1, 'b', 'o'), T0)).toEqual([
      { type: 'busy', session: 1, key: 'b', owner: 'o', limit: 'tokens' },
    ]);
  });
});

describe('determinism and validation', () => {
  test('the same commands at the same instants give the same effects and state', () => {
    const run = (): unknown[] => {
      const state = new TicketState({ leaseMs: LEASE, maxWaitersPerKey: 3 });
      const log: unknown[] = [];
      let seed = 42;
      const rand = (n: number): number => {
        seed = (seed * 1103515245 + 12345) % 2 ** 31;
        return seed % n;
      };
      const tokens = new Map<string, bigint>();
      for (let step = 0; step < 2_000; step++) {
        const now = T0 + step * 7;
        const key = `k${rand(4)}`;
        let command: Command;
        const pick = rand(10);
        if (pick < 5) command = acquire(rand(5), key, `o${rand(8)}`, rand(3) * 400);
        else if (pick < 8) command = release(rand(5), key, tokens.get(key) ?? 1n);
        else if (pick < 9) command = { type: 'disconnect', session: rand(5) };
        else command = { type: 'sweep', limit: 2 };
        const effects = state.apply(command, now);
        for (let due = state.nextDue(now); due !== undefined; due = state.nextDue(now))
          effects.push(...state.apply(due, now));
        for (const e of effects) if (e.type === 'granted') tokens.set(e.key, e.token);
        log.push(effects);
      }
      log.push(['k0', 'k1', 'k2', 'k3'].map((k) => state.get(k)));
      return log;
    };
    expect(run()).toEqual(run());
  });

  test('options and instants are validated', () => {
    expect(() => new TicketState({ leaseMs: 0 })).toThrow(RangeError);
    expect(() => new TicketState({ leaseMs: '5' as unknown as number })).toThrow(TypeError);
    expect(() => new TicketState({ leaseMs: 1, maxKeys: 0 })).toThrow(RangeError);
    expect(() => new TicketState({ leaseMs: 1, maxWaiters: -1 })).toThrow(RangeError);
    expect(() => new TicketState({ leaseMs: 1, lastToken: MAX_TOKEN + 1n })).toThrow(RangeError);
    const state = new TicketState({ leaseMs: 1 });
    expect(() => state.apply(acquire(1, 'k', 'o'), Number.NaN)).toThrow(RangeError);
    expect(() => state.apply({ type: 'bogus' } as unknown as Command, T0)).toThrow(TypeError);
  });
});

describe('cluster mode: eager expiry, adopt, restart-lease', () => {
  test('eager: every grant has a deadline, and its expire deletes a key without waiters', () => {
    const state = new TicketState({ leaseMs: LEASE, expiry: 'eager' });
    const { token } = granted(state.apply(acquire(1, 'k', 'a'), T0));
    expect(state.nextDeadline()).toBe(T0 + LEASE);
    expect(state.nextDue(T0 + LEASE - 1)).toBeUndefined();
    const due = state.nextDue(T0 + LEASE)!;
    expect(due).toEqual({ type: 'expire', key: 'k', token });
    expect(state.apply(due, T0 + LEASE)).toEqual([{ type: 'expired', key: 'k', owner: 'a', token }]);
    expect(state.get('k')).toBeUndefined();
    expect(state.nextDeadline()).toBeUndefined();
  });

  test('eager: the deadline stays when the last waiter leaves, and moves with each new grant', () => {
    const state = new TicketState({ leaseMs: LEASE, expiry: 'eager' });
    const first = granted(state.apply(acquire(1, 'k', 'a'), T0));
    state.apply(acquire(2, 'k', 'b', 100), T0);
    state.apply({ type: 'wait-timeout', key: 'k', waiter: state.get('k')!.waiters[0]!.id }, T0 + 100);
    expect(state.get('k')!.waiters).toEqual([]);
    expect(state.nextDeadline()).toBe(T0 + LEASE);
    state.apply(release(1, 'k', first.token), T0 + 200);
    granted(state.apply(acquire(3, 'k', 'c'), T0 + 300));
    expect(state.nextDeadline()).toBe(T0 + 300 + LEASE);
  });

  test('lazy (the default) keeps no deadline for a key without waiters', () => {
    const state = new TicketState({ leaseMs: LEASE });
    state.apply(acquire(1, 'k', 'a'), T0);
    expect(state.nextDeadline()).toBeUndefined();
    expect(() => new TicketState({ leaseMs: LEASE, expiry: 'soon' as never })).toThrow(RangeError);
  });

  test('adopt registers a grant with its lease from now and raises the token floor', () => {
    const state = new TicketState({ leaseMs: LEASE, expiry: 'eager' });
    const far = BigInt(T0) * 1000n + 5_000_000n; // a token from a clock 5 s ahead
    expect(state.apply(adopt('k', 'a', far), T0)).toEqual([
      { type: 'adopted', key: 'k', owner: 'a', token: far, expiresAt: T0 + LEASE },
    ]);
    expect(state.get('k')).toMatchObject({ owner: 'a', token: far, expiresAt: T0 + LEASE });
    expect(state.nextDeadline()).toBe(T0 + LEASE);
    expect(replies(state.apply(acquire(2, 'k', 'b'), T0 + 1))).toEqual([
      { type: 'timed-out', session: 2, key: 'k', owner: 'b', reason: 'held' },
    ]);
    expect(granted(state.apply(acquire(2, 'j', 'b'), T0 + 1)).token).toBe(far + 1n);
  });

  test('adopt of a registered key or a token out of range throws and changes nothing', () => {
    const state = new TicketState({ leaseMs: LEASE, expiry: 'eager' });
    state.apply(adopt('k', 'a', 42n), T0);
    expect(() => state.apply(adopt('k', 'x', 43n), T0)).toThrow(/already registered/);
    expect(() => state.apply(adopt('z', 'x', 0n), T0)).toThrow(RangeError);
    expect(() => state.apply(adopt('z', 'x', MAX_TOKEN + 1n), T0)).toThrow(RangeError);
    expect(state.get('k')).toMatchObject({ owner: 'a', token: 42n });
    expect(state.get('z')).toBeUndefined();
    expect(state.keyCount).toBe(1);
    expect(state.lastToken).toBe(42n);
  });
  test('eager: a keep moves the expiry in the deadline heap; the old deadline fires nothing', () => {
    const state = new TicketState({ leaseMs: LEASE, expiry: 'eager' });
    const { token } = granted(state.apply(acquire(1, 'k', 'a'), T0));
    granted(state.apply(acquire(1, 'j', 'b'), T0 + 100));
    expect(state.apply(keep(1, 'k', token), T0 + 500)[0]).toMatchObject({ type: 'kept' });
    // j's deadline is now the earliest; k's moved behind it.
    expect(state.nextDeadline()).toBe(T0 + 100 + LEASE);
    expect(state.nextDue(T0 + LEASE)).toBeUndefined();
    expect(state.apply(state.nextDue(T0 + 100 + LEASE)!, T0 + 100 + LEASE)).toMatchObject([{ key: 'j' }]);
    expect(state.nextDeadline()).toBe(T0 + 500 + LEASE);
    expect(state.apply(state.nextDue(T0 + 500 + LEASE)!, T0 + 500 + LEASE)).toEqual([
      { type: 'expired', key: 'k', owner: 'a', token },
    ]);
    // Expired (eagerly, deleted): a late keep is G.
    expect(state.apply(keep(1, 'k', token), T0 + 500 + LEASE)[0]).toMatchObject({
      type: 'gone',
      reason: 'not-registered',
    });
  });

  test('eager: an adopted grant (a new leader) is kept by its token like any other', () => {
    const state = new TicketState({ leaseMs: LEASE, expiry: 'eager' });
    state.apply(adopt('k', 'a', 42n), T0);
    expect(state.apply(keep(5, 'k', 42n), T0 + 300)[0]).toMatchObject({ type: 'kept', expiresAt: T0 + 300 + LEASE });
    expect(state.nextDeadline()).toBe(T0 + 300 + LEASE);
  });

  test('restart-lease moves the expiry later for the same token only, and says so', () => {
    const state = new TicketState({ leaseMs: LEASE, expiry: 'eager' });
    const { token } = granted(state.apply(acquire(1, 'k', 'a'), T0));
    expect(state.apply(restart('k', token + 1n), T0 + 50)).toEqual([]);
    expect(state.get('k')!.expiresAt).toBe(T0 + LEASE);
    expect(state.apply(restart('k', token), T0 + 50)).toEqual([
      { type: 'lease-restarted', key: 'k', owner: 'a', token, expiresAt: T0 + 50 + LEASE },
    ]);
    expect(state.get('k')!.expiresAt).toBe(T0 + 50 + LEASE);
    expect(state.nextDeadline()).toBe(T0 + 50 + LEASE);
    // Never earlier: a restart at an earlier instant reports the expiry it keeps.
    expect(state.apply(restart('k', token), T0)).toEqual([
      { type: 'lease-restarted', key: 'k', owner: 'a', token, expiresAt: T0 + 50 + LEASE },
    ]);
    expect(state.apply(restart('gone', 1n), T0)).toEqual([]);
  });

  test('restart-lease counts the lease from now + slackMs; a bad slack throws and changes nothing', () => {
    const state = new TicketState({ leaseMs: LEASE, expiry: 'eager' });
    const { token } = granted(state.apply(acquire(1, 'k', 'a'), T0));
    expect(state.apply(restart('k', token, 100), T0 + 10)).toEqual([
      { type: 'lease-restarted', key: 'k', owner: 'a', token, expiresAt: T0 + 110 + LEASE },
    ]);
    for (const slackMs of [-1, Number.NaN, Infinity, 2 ** 31]) {
      expect(() => state.apply(restart('k', token, slackMs), T0 + 20)).toThrow(RangeError);
    }
    expect(() => state.apply(restart('k', token, '5' as unknown as number), T0 + 20)).toThrow(TypeError);
    expect(state.get('k')!.expiresAt).toBe(T0 + 110 + LEASE);
  });

  test('lazy expiry: restarting the lease of a key with waiters moves the hand-off to the new expiry', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const { token } = granted(state.apply(acquire(1, 'k', 'a'), T0));
    state.apply(acquire(2, 'k', 'b', 10 * LEASE), T0);
    expect(state.nextDeadline()).toBe(T0 + LEASE);
    state.apply(restart('k', token), T0 + 300);
    expect(state.nextDeadline()).toBe(T0 + 300 + LEASE);
    expect(state.nextDue(T0 + LEASE)).toBeUndefined();
    const due = state.nextDue(T0 + 300 + LEASE)!;
    expect(granted(state.apply(due, T0 + 300 + LEASE))).toMatchObject({ session: 2, owner: 'b', path: 'expiry' });
  });

  test('a new leader: the same adopts and restarts at the same instants give the same effects and state', () => {
    const run = (): unknown[] => {
      const state = new TicketState({ leaseMs: LEASE, expiry: 'eager', lastToken: 10n });
      const log: unknown[] = [];
      for (let i = 0; i < 20; i++) log.push(state.apply(adopt(`k${i}`, `o${i}`, BigInt(100 + i * 7)), T0));
      for (let step = 0; step < 200; step++) {
        const now = T0 + step * 13;
        // Acquires over every key; restarts of the first ten only, so the others run out.
        const key = step % 3 === 0 ? `k${step % 25}` : `k${step % 10}`;
        const command =
          step % 3 === 0
            ? acquire(step % 4, key, `p${step}`, (step % 2) * 500)
            : restart(key, state.get(key)?.token ?? 1n, step % 5 === 0 ? 100 : undefined);
        const effects = state.apply(command, now);
        for (let due = state.nextDue(now); due !== undefined; due = state.nextDue(now))
          effects.push(...state.apply(due, now));
        log.push(effects);
      }
      log.push(
        Array.from({ length: 25 }, (_, i) => state.get(`k${i}`)),
        state.lastToken,
      );
      return log;
    };
    const first = run();
    expect(first).toEqual(run());
    const types = new Set((first.slice(0, -2) as Effect[][]).flat().map((e) => e.type));
    for (const type of ['adopted', 'lease-restarted', 'granted', 'expired']) expect(types).toContain(type);
  });
});
