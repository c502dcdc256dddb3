/** Election in the state machine: revs, published values, and what a watched key reports. Time is
 * a number passed in; nothing here sleeps. */
import { describe, expect, test } from 'vitest';
import type { Command, Effect, ObservedState } from '../src/state-types.js';
import { TicketState } from '../src/state.js';

const T0 = 1_800_000_000_000;
const LEASE = 1_000;

const acquire = (session: number, key: string, owner: string, waitMs = 0, mode: 'x' | 's' | number = 'x'): Command => ({
  type: 'acquire',
  session,
  key,
  owner,
  waitMs,
  mode,
});
const tokenOf = (effects: Effect[]): bigint => (effects.find((e) => e.type === 'granted') as { token: bigint }).token;
const changes = (effects: Effect[]): ObservedState[] => effects.flatMap((e) => (e.type === 'changed' ? [e.state] : []));
const publish = (key: string, token: bigint, value: string): Command => ({
  type: 'publish',
  session: 9,
  key,
  token,
  value,
});

describe('revs', () => {
  test("a key's first rev is its first grant's token; each change after it adds one", () => {
    const state = new TicketState({ leaseMs: LEASE });
    const t1 = tokenOf(state.apply(acquire(1, 'k', 'a'), T0));
    expect(state.get('k')!.rev).toBe(t1);
    state.apply(publish('k', t1, 'here'), T0);
    expect(state.get('k')!.rev).toBe(t1 + 1n);
    state.apply(acquire(2, 'k', 'b', 500), T0);
    expect(state.get('k')!.rev).toBe(t1 + 1n); // a waiter is not a change
    state.apply({ type: 'release', session: 1, key: 'k', token: t1 }, T0);
    // Release and hand-off in one command: one change.
    expect(state.get('k')!.rev).toBe(t1 + 2n);
    expect(state.lastToken).toBeGreaterThanOrEqual(t1 + 2n);
  });

  test('a forgotten key is vacant at the last token; its next rev is greater than every earlier one', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const t1 = tokenOf(state.apply(acquire(1, 'k', 'a'), T0));
    state.apply(publish('k', t1, 'v'), T0);
    state.apply(publish('k', t1, 'w'), T0);
    state.apply({ type: 'release', session: 1, key: 'k', token: t1 }, T0);
    expect(state.get('k')).toBeUndefined();
    const vacant = state.observed('k');
    expect(vacant).toEqual({ rev: state.lastToken, count: 0, exclusive: undefined });
    expect(vacant.rev).toBeGreaterThanOrEqual(t1 + 3n); // the release's rev
    const t2 = tokenOf(state.apply(acquire(1, 'k', 'a'), T0));
    expect(state.get('k')!.rev).toBe(t2);
    expect(t2).toBeGreaterThan(vacant.rev);
  });

  test("a key watched before its first grant is vacant at the last token, then jumps to the grant's token", () => {
    const state = new TicketState({ leaseMs: LEASE });
    state.apply({ type: 'watch', key: 'k' }, T0);
    expect(state.observed('k')).toEqual({ rev: 0n, count: 0, exclusive: undefined }); // nothing issued yet
    const t1 = tokenOf(state.apply(acquire(1, 'other', 'a'), T0));
    expect(state.observed('k').rev).toBe(t1);
    const granted = state.apply(acquire(2, 'k', 'b'), T0);
    expect(changes(granted).map((change) => change.rev)).toEqual([tokenOf(granted)]);
    expect(tokenOf(granted)).toBeGreaterThan(t1);
  });
});

describe('publish', () => {
  test('sets the value of the live exclusive grant under exactly that token; a new grant starts without one', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const t1 = tokenOf(state.apply(acquire(1, 'k', 'a'), T0));
    expect(state.apply(publish('k', t1, '10.0.0.5:8080 zone a'), T0)).toEqual([
      { type: 'published', session: 9, key: 'k', token: t1, value: '10.0.0.5:8080 zone a' },
    ]);
    expect(state.get('k')!.holders[0]!.value).toBe('10.0.0.5:8080 zone a');
    expect(state.observed('k').exclusive).toEqual({ token: t1, owner: 'a', value: '10.0.0.5:8080 zone a' });
    state.apply({ type: 'release', session: 1, key: 'k', token: t1 }, T0);
    tokenOf(state.apply(acquire(2, 'k', 'b'), T0));
    expect(state.get('k')!.holders[0]!.value).toBeUndefined();
  });

  test('refuses a stale token, an expired grant and a shared or semaphore grant, changing nothing', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const t1 = tokenOf(state.apply(acquire(1, 'k', 'a'), T0));
    const s1 = tokenOf(state.apply(acquire(1, 'sh', 'a', 0, 's'), T0));
    const n1 = tokenOf(state.apply(acquire(1, 'sem', 'a', 0, 2), T0));
    const revs = () => ['k', 'sh', 'sem'].map((key) => state.get(key)!.rev);
    const before = revs();
    const gone = (key: string, token: bigint, reason: string, now = T0) =>
      expect(state.apply(publish(key, token, 'v'), now)).toEqual([{ type: 'gone', session: 9, key, token, reason }]);
    gone('k', t1 + 100n, 'token-mismatch');
    gone('nope', t1, 'not-registered');
    gone('sh', s1, 'not-exclusive');
    gone('sem', n1, 'not-exclusive');
    gone('k', t1, 'expired', T0 + LEASE);
    expect(revs()).toEqual(before);
    for (const value of ['', 'x'.repeat(513), 'caf\u00e9', 'a\nb']) {
      expect(() => state.apply(publish('k', t1, value), T0)).toThrow(RangeError);
    }
    expect(state.get('k')!.holders[0]!.value).toBeUndefined();
    expect(revs()).toEqual(before);
  });
});

describe('watched keys', () => {
  test('each command that changes a watched key yields one `changed`, with its state after the command', () => {
    const state = new TicketState({ leaseMs: LEASE });
    expect(state.apply({ type: 'watch', key: 'k' }, T0)).toEqual([]);
    const granted = state.apply(acquire(1, 'k', 'a'), T0);
    const t1 = tokenOf(granted);
    expect(changes(granted)).toEqual([{ rev: t1, count: 1, exclusive: { token: t1, owner: 'a', value: undefined } }]);
    state.apply(acquire(2, 'k', 'b', 5_000), T0);
    const handOff = state.apply({ type: 'release', session: 1, key: 'k', token: t1 }, T0);
    const t2 = tokenOf(handOff);
    expect(changes(handOff)).toEqual([
      { rev: t1 + 1n, count: 1, exclusive: { token: t2, owner: 'b', value: undefined } },
    ]);
    const released = state.apply({ type: 'release', session: 2, key: 'k', token: t2 }, T0);
    expect(changes(released)).toEqual([{ rev: t1 + 2n, count: 0, exclusive: undefined }]);
    // Vacant and watched: it keeps its entry and its rev.
    expect(state.observed('k').rev).toBe(t1 + 2n);
    expect(state.get('k')).toBeUndefined();
    expect(changes(state.apply(acquire(3, 'k', 's1', 0, 's'), T0))).toEqual([
      { rev: t1 + 3n, count: 1, exclusive: undefined },
    ]);
    // Unwatched keys yield none.
    expect(changes(state.apply(acquire(1, 'other', 'a'), T0))).toEqual([]);
  });

  test('a watched key ends at its expiry, not lazily; unwatched, its vacant entry goes', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const t1 = tokenOf(state.apply(acquire(1, 'k', 'a'), T0));
    expect(state.nextDeadline()).toBeUndefined(); // lazy: no deadline without waiters
    state.apply({ type: 'watch', key: 'k' }, T0);
    expect(state.nextDeadline()).toBe(T0 + LEASE);
    const due = state.nextDue(T0 + LEASE)!;
    expect(due).toEqual({ type: 'expire', key: 'k', token: t1 });
    expect(changes(state.apply(due, T0 + LEASE))).toEqual([{ rev: t1 + 1n, count: 0, exclusive: undefined }]);
    expect(state.keyCount).toBe(1);
    state.apply({ type: 'unwatch', key: 'k' }, T0 + LEASE);
    expect(state.keyCount).toBe(0);
    // Unwatched while held: its deadline goes with the watch.
    state.apply({ type: 'watch', key: 'k' }, T0 + LEASE);
    state.apply(acquire(1, 'k', 'a'), T0 + LEASE);
    expect(state.nextDeadline()).toBe(T0 + 2 * LEASE);
    state.apply({ type: 'unwatch', key: 'k' }, T0 + LEASE);
    expect(state.nextDeadline()).toBeUndefined();
  });
});

describe('adopt', () => {
  test('takes the stored rev and value; the last token rises to the rev', () => {
    const state = new TicketState({ leaseMs: LEASE, expiry: 'eager' });
    state.apply({ type: 'adopt', key: 'k', owner: 'a', token: 50n, rev: 90n, value: 'v w' }, T0);
    expect(state.get('k')).toMatchObject({ rev: 90n, holders: [{ token: 50n, value: 'v w' }] });
    expect(state.lastToken).toBe(90n);
    expect(() => state.apply({ type: 'adopt', key: 's', owner: 'a', token: 51n, mode: 's', value: 'v' }, T0)).toThrow(
      RangeError,
    );
    expect(state.get('s')).toBeUndefined();
  });

  test("keeps the stored rev below the last token (a new leader's reservation), for every holder", () => {
    const state = new TicketState({ leaseMs: LEASE, expiry: 'eager', lastToken: 1_000n });
    state.apply({ type: 'adopt', key: 'k', owner: 'a', token: 50n, rev: 90n }, T0);
    state.apply({ type: 'adopt', key: 's', owner: 'a', token: 51n, mode: 's', rev: 95n }, T0);
    state.apply({ type: 'adopt', key: 's', owner: 'b', token: 52n, mode: 's', rev: 95n }, T0);
    expect(state.observed('k').rev).toBe(90n);
    expect(state.observed('s')).toMatchObject({ rev: 95n, count: 2 });
    expect(state.lastToken).toBe(1_000n);
    state.apply({ type: 'release', session: 1, key: 'k', token: 50n }, T0);
    expect(state.observed('k').rev).toBe(1_000n); // forgotten: vacant at the last token
    const [granted] = state.apply({ type: 'acquire', session: 1, key: 'k', owner: 'c', waitMs: 0 }, T0);
    expect(state.observed('k').rev).toBe((granted as { token: bigint }).token);
  });
});
