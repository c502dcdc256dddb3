/** Modes in the state machine: shared/exclusive locks and semaphores, their rules one by one, and
 * a seeded random run compared step by step with a small reference model (a queue and a holder
 * set per key, written plainly, no I/O). Time is a number passed in; nothing here sleeps. */
import { describe, expect, test } from 'vitest';
import type { LockMode } from '../src/modes.js';
import type { Command, Effect } from '../src/state-types.js';
import { TicketState } from '../src/state.js';
import { prng } from './helpers.js';

const T0 = 1_800_000_000_000;
const LEASE = 1_000;

const acquire = (session: number, key: string, owner: string, mode: LockMode, waitMs = 0): Command => ({
  type: 'acquire',
  session,
  key,
  owner,
  waitMs,
  mode,
});
const grants = (effects: Effect[]) => effects.filter((e) => e.type === 'granted');
const answer = (effects: Effect[]) => effects.find((e) => e.type !== 'expired')!;

describe('shared/exclusive', () => {
  test('shared requests hold together; an exclusive one waits for all of them, and later shared ones queue behind it', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const r1 = grants(state.apply(acquire(1, 'k', 'r1', 's'), T0))[0]!;
    const r2 = grants(state.apply(acquire(2, 'k', 'r2', 's'), T0))[0]!;
    expect(r2.token).toBeGreaterThan(r1.token);
    expect(answer(state.apply(acquire(3, 'k', 'w', 'x', 500), T0))).toMatchObject({ type: 'queued', position: 1 });
    // No starvation: a shared request arriving while the writer waits queues behind it.
    expect(answer(state.apply(acquire(4, 'k', 'r3', 's', 500), T0))).toMatchObject({ type: 'queued', position: 2 });
    expect(answer(state.apply(acquire(5, 'k', 'r4', 's', 500), T0))).toMatchObject({ type: 'queued', position: 3 });
    expect(state.apply({ type: 'release', session: 1, key: 'k', token: r1.token }, T0 + 1)).toHaveLength(1);
    const w = grants(state.apply({ type: 'release', session: 2, key: 'k', token: r2.token }, T0 + 2));
    expect(w).toMatchObject([{ owner: 'w', mode: 'x', path: 'handoff' }]);
    // The run of shared requests at the head is granted together.
    const run = grants(state.apply({ type: 'release', session: 3, key: 'k', token: w[0]!.token }, T0 + 3));
    expect(run.map((g) => g.owner)).toEqual(['r3', 'r4']);
    expect(run[0]!.token).toBeGreaterThan(w[0]!.token);
    expect(state.get('k')).toMatchObject({
      kind: 'lock',
      permits: undefined,
      holders: [{ shared: true }, { shared: true }],
    });
  });

  test('mode x is today’s mutex; an exclusive holder refuses a shared request with wait 0', () => {
    const state = new TicketState({ leaseMs: LEASE });
    state.apply(acquire(1, 'k', 'w', 'x'), T0);
    expect(answer(state.apply(acquire(2, 'k', 'r', 's'), T0))).toMatchObject({ type: 'timed-out', reason: 'held' });
  });

  test('over the shared-holder limit: busy, not queued', () => {
    const state = new TicketState({ leaseMs: LEASE, maxSharedHolders: 2 });
    state.apply(acquire(1, 'k', 'a', 's'), T0);
    state.apply(acquire(2, 'k', 'b', 's'), T0);
    expect(state.apply(acquire(3, 'k', 'c', 's', 100), T0)).toEqual([
      { type: 'busy', session: 3, key: 'k', owner: 'c', limit: 'shared-holders' },
    ]);
    expect(state.get('k')!.waiters).toEqual([]);
  });
});

describe('semaphores', () => {
  test('N holders at once, each in the lowest free slot; a finished slot is reused; the N+1st waits', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const g = [0, 1, 2].map((i) => grants(state.apply(acquire(i, 'gpu', `o${i}`, 3), T0 + i))[0]!);
    expect(g.map((x) => x.slot)).toEqual([0, 1, 2]);
    expect(answer(state.apply(acquire(9, 'gpu', 'late', 3, 1000), T0 + 5))).toMatchObject({ type: 'queued' });
    const next = grants(state.apply({ type: 'release', session: 1, key: 'gpu', token: g[1]!.token }, T0 + 6));
    expect(next).toMatchObject([{ owner: 'late', slot: 1, mode: 3 }]);
    expect(next[0]!.token).toBeGreaterThan(g[2]!.token);
    expect(state.get('gpu')).toMatchObject({ kind: 'semaphore', permits: 3 });
  });

  test('a mode that does not fit the key’s kind is a conflict at once, whatever its wait', () => {
    const state = new TicketState({ leaseMs: LEASE });
    state.apply(acquire(1, 'sem', 'a', 2), T0);
    state.apply(acquire(2, 'rw', 'b', 's'), T0);
    for (const [key, mode] of [
      ['sem', 3],
      ['sem', 'x'],
      ['sem', 's'],
      ['rw', 2],
    ] as const) {
      expect(state.apply(acquire(3, key, 'c', mode, 60_000), T0)).toEqual([
        { type: 'conflict', session: 3, key, owner: 'c' },
      ]);
    }
    expect(state.waiterCount).toBe(0);
  });

  test('a key keeps its kind only while it has holders or waiters', () => {
    const state = new TicketState({ leaseMs: LEASE });
    const a = grants(state.apply(acquire(1, 'k', 'a', 2), T0))[0]!;
    state.apply({ type: 'release', session: 1, key: 'k', token: a.token }, T0);
    expect(grants(state.apply(acquire(2, 'k', 'b', 's'), T0))).toHaveLength(1);
    // …and an expired key (nothing queued) takes any mode too: the expired grant is dropped first.
    expect(state.apply(acquire(3, 'k', 'c', 5), T0 + LEASE).map((e) => e.type)).toEqual(['expired', 'granted']);
  });

  test('N above the limit is busy', () => {
    const state = new TicketState({ leaseMs: LEASE, maxPermits: 4 });
    expect(state.apply(acquire(1, 'k', 'a', 5), T0)).toEqual([
      { type: 'busy', session: 1, key: 'k', owner: 'a', limit: 'permits' },
    ]);
  });

  test('a waiter that leaves the queue lets those behind it in when they fit', () => {
    const state = new TicketState({ leaseMs: LEASE });
    state.apply(acquire(1, 'k', 'r', 's'), T0);
    state.apply(acquire(2, 'k', 'w', 'x', 60_000), T0);
    state.apply(acquire(3, 'k', 'r2', 's', 60_000), T0);
    expect(grants(state.apply({ type: 'disconnect', session: 2 }, T0 + 1))).toMatchObject([
      { owner: 'r2', path: 'unblocked' },
    ]);
  });
});

describe('lazy takeover, generalized', () => {
  test('every holder expired: the acquire is granted ahead of waiters, then the waiters that fit', () => {
    const state = new TicketState({ leaseMs: LEASE });
    state.apply(acquire(1, 'k', 'w', 'x'), T0);
    state.apply(acquire(2, 'k', 'r1', 's', 60_000), T0 + 1);
    const effects = state.apply(acquire(3, 'k', 'r2', 's'), T0 + LEASE);
    expect(effects.map((e) => e.type)).toEqual(['expired', 'granted', 'granted']);
    expect(grants(effects)).toMatchObject([
      { owner: 'r2', path: 'takeover' },
      { owner: 'r1', path: 'expiry' },
    ]);
  });

  test('some holders expired: they are dropped, the waiters that fit go first, the acquire follows FIFO', () => {
    const state = new TicketState({ leaseMs: LEASE });
    state.apply(acquire(1, 'k', 'a', 2), T0);
    state.apply(acquire(2, 'k', 'b', 2), T0 + 500);
    state.apply(acquire(3, 'k', 'c', 2, 60_000), T0 + 600);
    const effects = state.apply(acquire(4, 'k', 'd', 2, 0), T0 + LEASE);
    expect(effects.map((e) => e.type)).toEqual(['expired', 'granted', 'timed-out']);
    expect(grants(effects)).toMatchObject([{ owner: 'c', slot: 0, path: 'expiry' }]);
  });
});

describe('adopt (a new cluster leader rebuilding a key)', () => {
  test('shared and semaphore grants are adopted with their slots; the next grant takes a free slot', () => {
    const state = new TicketState({ leaseMs: LEASE, expiry: 'eager' });
    const adopt = (key: string, owner: string, token: bigint, mode: LockMode, slot?: number): Command => ({
      type: 'adopt',
      key,
      owner,
      token,
      mode,
      slot,
    });
    state.apply(adopt('sem', 'a', 10n, 3, 2), T0);
    state.apply(adopt('sem', 'b', 11n, 3, 0), T0);
    state.apply(adopt('doc', 'r1', 12n, 's'), T0);
    state.apply(adopt('doc', 'r2', 13n, 's'), T0);
    expect(grants(state.apply(acquire(1, 'sem', 'c', 3), T0))).toMatchObject([{ slot: 1 }]);
    expect(answer(state.apply(acquire(1, 'sem', 'd', 3), T0))).toMatchObject({ type: 'timed-out' });
    expect(answer(state.apply(acquire(1, 'doc', 'w', 'x'), T0))).toMatchObject({ type: 'timed-out' });
    for (const bad of [
      adopt('sem', 'e', 20n, 3, 1), // slot taken (by c)
      adopt('sem', 'e', 10n, 3, 1), // token there
      adopt('sem', 'e', 21n, 4, 1), // another kind
      adopt('doc', 'e', 22n, 'x'), // x beside shared holders
      adopt('sem', 'e', 23n, 3, 3), // no such slot
    ]) {
      expect(() => state.apply(bad, T0)).toThrow(/already registered/);
    }
    expect(state.get('sem')!.holders.map((h) => h.slot)).toEqual([2, 0, 1]);
  });
});

// ---------------------------------------------------------------------------------------------
// The reference model: per key a holder list and a queue, every rule written out plainly.

interface MHolder {
  owner: string;
  token: bigint;
  mode: LockMode;
  slot: number | undefined;
  expiresAt: number;
}
interface MWaiter {
  id: number;
  session: number;
  owner: string;
  mode: LockMode;
  deadline: number;
  queuedAt: number;
}
interface MKey {
  kind: number;
  holders: MHolder[];
  queue: MWaiter[];
  rev: bigint;
  revAt: number;
}

class Model {
  keys = new Map<string, MKey>();
  last = 0n;
  ids = 0;
  applied = 0;
  constructor(
    readonly maxShared: number,
    readonly maxPermits: number,
  ) {}

  token(now: number): bigint {
    const wall = BigInt(Math.floor(now * 1000));
    this.last = wall > this.last + 1n ? wall : this.last + 1n;
    return this.last;
  }
  /** A change of `k`'s holders: its rev rises once per command, from the last token at first, and
   * the last token never falls below a rev. */
  changed(k: MKey): void {
    if (k.revAt === this.applied) return;
    k.revAt = this.applied;
    k.rev = k.rev === 0n ? this.last : k.rev + 1n;
    if (k.rev > this.last) this.last = k.rev;
  }
  /** Whether `mode` may join `k`'s holders now. */
  fits(k: MKey, mode: LockMode): boolean {
    const xs = k.holders.filter((h) => h.mode === 'x').length;
    const ss = k.holders.filter((h) => h.mode === 's').length;
    if (typeof mode === 'number') return k.holders.length < mode;
    if (mode === 'x') return k.holders.length === 0;
    return xs === 0 && ss < this.maxShared;
  }
  grant(
    k: MKey,
    key: string,
    session: number,
    owner: string,
    mode: LockMode,
    now: number,
    path: string,
    at: number,
  ): Effect {
    let slot: number | undefined;
    if (typeof mode === 'number') for (slot = 0; k.holders.some((h) => h.slot === slot); slot++);
    const token = this.token(now);
    k.holders.push({ owner, token, mode, slot, expiresAt: now + LEASE });
    this.changed(k);
    return {
      type: 'granted',
      session,
      key,
      owner,
      token,
      expiresAt: now + LEASE,
      path,
      mode,
      slot,
      requestedAt: at,
    } as Effect;
  }
  drain(k: MKey, key: string, now: number, path: string, out: Effect[]): void {
    while (k.queue.length > 0) {
      const w = k.queue[0]!;
      if (w.deadline <= now) {
        k.queue.shift();
        out.push({ type: 'timed-out', session: w.session, key, owner: w.owner, reason: 'waited' });
      } else if (this.fits(k, w.mode)) {
        k.queue.shift();
        out.push(this.grant(k, key, w.session, w.owner, w.mode, now, path, w.queuedAt));
      } else break;
    }
    if (k.holders.length === 0 && k.queue.length === 0) this.keys.delete(key);
  }
  dropExpired(k: MKey, key: string, now: number, out: Effect[]): void {
    for (const h of k.holders.filter((h) => now >= h.expiresAt)) {
      out.push({ type: 'expired', key, owner: h.owner, token: h.token });
      this.changed(k);
    }
    k.holders = k.holders.filter((h) => now < h.expiresAt);
  }

  apply(c: Command, now: number): Effect[] {
    this.applied++;
    const out: Effect[] = [];
    if (c.type === 'acquire') {
      const { session, key, owner, waitMs } = c;
      const mode = c.mode ?? 'x';
      if (typeof mode === 'number' && mode > this.maxPermits)
        return [{ type: 'busy', session, key, owner, limit: 'permits' }];
      const kind = typeof mode === 'number' ? mode : 0;
      let k = this.keys.get(key);
      let takeover = false;
      if (k !== undefined && k.holders.some((h) => now >= h.expiresAt)) {
        this.dropExpired(k, key, now, out);
        takeover = k.holders.length === 0;
        if (!takeover) this.drain(k, key, now, 'expiry', out);
      }
      if (k === undefined) this.keys.set(key, (k = { kind, holders: [], queue: [], rev: 0n, revAt: 0 }));
      if (k.holders.length === 0 && k.queue.length === 0) k.kind = kind;
      const refuse = (e: Effect): Effect[] => {
        out.push(e);
        if (k.holders.length === 0) this.drain(k, key, now, 'expiry', out);
        return out;
      };
      if (k.kind !== kind) return refuse({ type: 'conflict', session, key, owner });
      if (mode === 's' && k.holders.length >= this.maxShared && k.holders.every((h) => h.mode === 's'))
        return refuse({ type: 'busy', session, key, owner, limit: 'shared-holders' });
      if ((k.queue.length === 0 || takeover) && this.fits(k, mode)) {
        out.push(this.grant(k, key, session, owner, mode, now, takeover ? 'takeover' : 'free', now));
        if (takeover) this.drain(k, key, now, 'expiry', out);
        return out;
      }
      if (waitMs === 0) return refuse({ type: 'timed-out', session, key, owner, reason: 'held' });
      const w = { id: this.ids++, session, owner, mode, deadline: now + waitMs, queuedAt: now };
      k.queue.push(w);
      return refuse({
        type: 'queued',
        session,
        key,
        owner,
        waiter: w.id,
        deadline: w.deadline,
        position: k.queue.length,
      });
    }
    if (c.type === 'release' || c.type === 'keep') {
      const k = this.keys.get(c.key);
      const h = k?.holders.find((x) => x.token === c.token);
      const { session, key, token } = c;
      const reason = k === undefined ? 'not-registered' : 'token-mismatch';
      if (c.type === 'release') {
        if (h === undefined) return [{ type: 'not-released', session, key, token, reason }];
        out.push({ type: 'released', session, key, token });
        k!.holders.splice(k!.holders.indexOf(h), 1);
        this.changed(k!);
        this.drain(k!, key, now, 'handoff', out);
        return out;
      }
      if (h === undefined) return [{ type: 'gone', session, key, token, reason }];
      if (now >= h.expiresAt) return [{ type: 'gone', session, key, token, reason: 'expired' }];
      h.expiresAt = Math.max(h.expiresAt, now + LEASE);
      return [{ type: 'kept', session, key, owner: h.owner, token, expiresAt: h.expiresAt, leaseMs: LEASE }];
    }
    if (c.type === 'expire') {
      const k = this.keys.get(c.key);
      const h = k?.holders.find((x) => x.token === c.token);
      if (h === undefined || now < h.expiresAt) return [];
      out.push({ type: 'expired', key: c.key, owner: h.owner, token: h.token });
      k!.holders.splice(k!.holders.indexOf(h), 1);
      this.changed(k!);
      this.drain(k!, c.key, now, 'expiry', out);
      return out;
    }
    if (c.type === 'wait-timeout' || c.type === 'disconnect') {
      const leaving: Array<[string, MKey, MWaiter]> = [];
      for (const [key, k] of this.keys)
        for (const w of k.queue)
          if (c.type === 'disconnect' ? w.session === c.session : w.id === c.waiter && now >= w.deadline)
            leaving.push([key, k, w]);
      leaving.sort((a, b) => a[2].id - b[2].id);
      for (const [key, k, w] of leaving) {
        k.queue.splice(k.queue.indexOf(w), 1);
        const { session, owner } = w;
        out.push(
          c.type === 'wait-timeout'
            ? { type: 'timed-out', session, key, owner, reason: 'waited' }
            : { type: 'abandoned', session, key, owner, waiter: w.id },
        );
      }
      for (const [key, k] of leaving) if (this.keys.get(key) === k) this.drain(k, key, now, 'unblocked', out);
      return out;
    }
    if (c.type === 'sweep') {
      for (const [key, k] of [...this.keys]) {
        if (k.queue.length > 0) continue;
        this.dropExpired(k, key, now, out);
        if (k.holders.length === 0) this.keys.delete(key);
      }
      return out;
    }
    throw new Error(`model: ${c.type}`);
  }
}

const show = (v: unknown) => JSON.stringify(v, (_, x: unknown) => (typeof x === 'bigint' ? `${x}n` : x));
/** Effects in a comparable form: waiter ids are each side's own; sweep progress is the machine's. */
function normal(effects: Effect[]): string[] {
  return effects
    .filter((e) => e.type !== 'swept')
    .map((e) => show({ ...e, waiter: undefined, slot: 'slot' in e ? e.slot : undefined }))
    .sort();
}

describe('against the reference model', () => {
  const seeds = process.env.MODES_SEED !== undefined ? [Number(process.env.MODES_SEED)] : [1, 2, 3, 4, 5, 6, 7, 8];
  test.each(seeds)('seed %i: the same effects and the same holders and queues, and the safety rules hold', (seed) => {
    const rand = prng(seed);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
    const state = new TicketState({ leaseMs: LEASE, maxSharedHolders: 3, maxPermits: 3 });
    const model = new Model(3, 3);
    const tokens: Array<{ key: string; token: bigint; session: number }> = [];
    /** The machine's waiter id → the model's. */
    const ids = new Map<number, number>();
    const lastToken = new Map<string, bigint>();
    let now = T0;
    const step = (command: Command): void => {
      let mine = command;
      if (command.type === 'wait-timeout') mine = { ...command, waiter: ids.get(command.waiter)! };
      const got = state.apply(command, now);
      const want = model.apply(mine, now);
      expect(normal(got), `seed ${seed} at ${now - T0}: ${show(command)}`).toEqual(normal(want));
      for (const e of got) {
        if (e.type === 'queued')
          ids.set(e.waiter, (want.find((w) => w.type === 'queued') as { waiter: number }).waiter);
        if (e.type === 'granted') {
          expect(e.token).toBeGreaterThan(lastToken.get(e.key) ?? 0n);
          lastToken.set(e.key, e.token);
          tokens.push({ key: e.key, token: e.token, session: e.session });
        }
      }
      for (const [key, k] of model.keys) {
        const view = state.get(key)!;
        expect(view.rev, `seed ${seed}: rev of ${key}`).toBe(k.rev);
        expect(
          view.holders.map((h) => [h.owner, h.token, h.slot, h.expiresAt]),
          `seed ${seed}: holders of ${key}`,
        ).toEqual(k.holders.map((h) => [h.owner, h.token, h.slot, h.expiresAt]));
        expect(view.waiters.map((w) => [w.owner, w.mode, w.deadline])).toEqual(
          k.queue.map((w) => [w.owner, w.mode, w.deadline]),
        );
        // Safety: live holders never exceed N, never share a slot, never mix x with anything.
        const live = k.holders.filter((h) => now < h.expiresAt);
        if (k.kind > 0) {
          expect(live.length).toBeLessThanOrEqual(k.kind);
          expect(new Set(live.map((h) => h.slot)).size).toBe(live.length);
        } else if (live.some((h) => h.mode === 'x')) expect(live).toHaveLength(1);
      }
      expect(state.keyCount).toBe(model.keys.size);
    };
    for (let i = 0; i < 3000; i++) {
      const r = rand();
      const session = 1 + Math.floor(rand() * 6);
      if (r < 0.45) {
        const mode = pick<LockMode>(['x', 's', 's', 2, 3, 4]);
        step(acquire(session, pick(['a', 'b', 'c']), `o${session}`, mode, pick([0, 0, 50, 300, 2000])));
      } else if (r < 0.65 && tokens.length > 0) {
        const t = tokens[Math.floor(rand() * tokens.length)]!;
        step({ type: 'release', session: t.session, key: t.key, token: t.token });
      } else if (r < 0.75 && tokens.length > 0) {
        const t = tokens[Math.floor(rand() * tokens.length)]!;
        step({ type: 'keep', session: t.session, key: t.key, token: t.token });
      } else if (r < 0.8) {
        step({ type: 'disconnect', session });
      } else if (r < 0.83) {
        step({ type: 'sweep' });
      } else {
        now += Math.floor(rand() * 400);
        for (let due = state.nextDue(now); due !== undefined; due = state.nextDue(now)) step(due);
      }
    }
  });
});
