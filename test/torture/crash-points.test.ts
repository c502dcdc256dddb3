// kill -9 at every step: a child process SIGKILLs itself just before each named system-call step
// (faults.kill(step), the addon's test-only fault points) inside every kind of acquire, a refresh,
// a renew and a release, on disk and on tmpfs. That the child died of SIGKILL proves the step was
// reached. After each death the directory must be consistent: the record parses and is exactly
// the old one (died before the rename) or exactly the new one (after it); a temp file is left
// only by a death between creating and renaming it, and is never taken for the record; a new
// acquire by another process succeeds at once (the dead holder's flocks are gone; the TTL is a
// minute) with a token greater than every token issued or attempted before; and the lease then
// works normally.
import diagnostics from 'node:diagnostics_channel';
import fs from 'node:fs';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { Lease } from '../../src/flock/lease.js';
import { formatRecord, parseRecord } from '../../src/flock/record.js';
import { filesystems, freshDir } from '../helpers/dirs.js';
import { isFlocked, leaseFiles, waitFiles } from '../helpers/lease-files.js';
import { until } from '../helpers/until.js';
import { Agent, dirState } from './harness.js';

const TTL = 60_000;
const LOCK = ['lock.open', 'lock.flock', 'read.open'];
const WRITE = ['temp.open', 'temp.write', 'temp.fsync', 'temp.close', 'rename']; // before the commit point
const DURABLE = ['dir.open', 'dir.fsync']; // after it
const LEAVES_TEMP = new Set(['temp.write', 'temp.fsync', 'temp.close', 'rename']);
const AFTER_RENAME = new Set([...DURABLE, 'unlink', 'commit.done', 'unlock', 'close']);

type Setup = 'free' | 'expired' | 'crashed' | 'held';
interface Case {
  setup: Setup;
  op: 'acquire' | 'renew' | 'release';
  steps: string[];
}
const CASES: Record<string, Case> = {
  'acquire (free id)': {
    setup: 'free',
    op: 'acquire',
    steps: [...LOCK, 'live.open', 'live.flock', ...WRITE, ...DURABLE, 'commit.done', 'unlock'],
  },
  'acquire (takeover of an expired lease)': {
    setup: 'expired',
    op: 'acquire',
    steps: [...LOCK, 'read.read', 'live.open', 'live.flock', ...WRITE, ...DURABLE, 'unlink', 'commit.done', 'unlock'],
  },
  'acquire (takeover of a crashed holder)': {
    setup: 'crashed',
    op: 'acquire',
    steps: [
      ...LOCK,
      'read.read',
      'probe.open',
      'probe.flock',
      'live.open',
      'live.flock',
      ...WRITE,
      ...DURABLE,
      'unlink',
      'commit.done',
      'unlock',
    ],
  },
  'refresh (same-owner re-acquire)': {
    setup: 'held',
    op: 'acquire',
    steps: [...LOCK, 'read.read', ...WRITE, ...DURABLE, 'commit.done', 'unlock'],
  },
  renew: { setup: 'held', op: 'renew', steps: [...LOCK, 'read.read', ...WRITE, ...DURABLE, 'commit.done', 'unlock'] },
  release: {
    setup: 'held',
    op: 'release',
    // The released .live is closed after the transition lock is let go.
    steps: [...LOCK, 'read.read', ...WRITE, ...DURABLE, 'unlink', 'commit.done', 'unlock', 'close'],
  },
};

const GHOST_TOKEN = 1_000_000_000_000_000n; // an earlier generation's token (wall-clock µs of 2001)

/** Runs `task` over `items`, `width` at a time. */
async function pool<T>(items: T[], width: number, task: (item: T) => Promise<void>): Promise<void> {
  const queue = [...items];
  await Promise.all(
    Array.from({ length: width }, async () => {
      for (let item = queue.shift(); item !== undefined; item = queue.shift()) await task(item);
    }),
  );
}

/** Every token a dead process's leftovers name: the record's, the .live files', and the one a
 * complete temp file meant to issue. */
function tokensLeft(dir: string, state: ReturnType<typeof dirState>): bigint[] {
  const tokens = state.record === undefined ? [] : [state.record.token];
  tokens.push(...state.liveTokens);
  for (const name of state.temps) {
    const bytes = fs.readFileSync(join(dir, name));
    if (bytes.length > 0) tokens.push(parseRecord(bytes).token);
  }
  return tokens;
}

/** alice holds s1 in one agent; bob waits for it in another, queued and out of his transition (a
 * stop or a fault inside one would hit the wrong step, or hold the lock others need). */
async function queuedBehindHolder(dir: string, step: string) {
  const holder = await Agent.start(dir, { ttlMs: TTL });
  const holderToken = BigInt((await holder.acquire('s1', 'alice')).token);
  const waiter = await Agent.start(dir, { ttlMs: TTL });
  const waiting = waiter.call({ op: 'acquire', id: 's1', owner: 'bob', waitMs: 20_000 });
  const lock = leaseFiles(dir, 's1').lock;
  await until(async () => waitFiles(dir).length > 0 && !(await isFlocked(lock)), `${step}: bob queued`);
  return { holder, holderToken, waiter, waiting };
}

const takeovers = new Map<string, { previous: bigint; reason: string }>();
diagnostics.subscribe('flocklease:takeover', (message) => {
  const { lease, grant, previous, reason } = message as {
    lease: Lease;
    grant: { token: bigint };
    previous?: { token: bigint };
    reason: string;
  };
  if (previous !== undefined) takeovers.set(`${lease.dir}:${grant.token}`, { previous: previous.token, reason });
});

describe.each(filesystems)('on %s', (_fs, root) => {
  test.each(Object.entries(CASES))(
    'SIGKILL at every step of %s: the directory stays consistent and the next acquire succeeds with a greater token',
    async (_name, c) => {
      await pool(c.steps, 3, async (step) => {
        const dir = freshDir(root);
        const files = leaseFiles(dir, 's1');
        const tokens: bigint[] = []; // every token issued or attempted for s1
        fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
        if (c.setup === 'expired' || c.setup === 'crashed') {
          const expiryMs = c.setup === 'expired' ? Date.now() - 1_000 : Date.now() + TTL;
          fs.writeFileSync(
            files.record,
            formatRecord({ owner: 'ghost', token: GHOST_TOKEN, expiryMs, session: 's1' }),
            { mode: 0o600 },
          );
          if (c.setup === 'crashed') fs.writeFileSync(files.live(GHOST_TOKEN), '', { mode: 0o600 }); // its flock died with it
          tokens.push(GHOST_TOKEN);
        }
        const agent = await Agent.start(dir, { ttlMs: TTL });
        if (c.setup === 'held') tokens.push(BigInt((await agent.acquire('s1', 'alice')).token));
        const before = fs.existsSync(files.record) ? fs.readFileSync(files.record, 'latin1') : undefined;

        await agent.must({ op: 'fault', action: 'kill', step });
        const reply = await agent.call(
          c.op === 'acquire' ? { op: 'acquire', id: 's1', owner: 'alice' } : { op: c.op, id: 's1' },
        );
        expect(reply, `${step}: the child should have died at the step, not answered`).toMatchObject({
          code: 'EAGENTEXITED',
        });
        expect((await agent.exited).signal, step).toBe('SIGKILL');

        // The directory: the record is the old one or the new one, never anything else.
        const state = dirState(dir, files.safe);
        expect(state.unknown, step).toEqual([]);
        const after = fs.existsSync(files.record) ? fs.readFileSync(files.record, 'latin1') : undefined;
        if (!AFTER_RENAME.has(step)) {
          expect(after, `${step}: died before the rename, the old record must stand`).toBe(before);
        } else {
          expect(after, `${step}: died after the rename, the new record must stand`).not.toBe(before);
          const expected = c.op === 'release' ? { owner: '', token: tokens.at(-1) } : { owner: 'alice' };
          expect(state.record, step).toMatchObject(expected);
          if (c.setup === 'held') expect(state.record!.token, step).toBe(tokens.at(-1));
        }
        if (state.record) tokens.push(state.record.token);
        tokens.push(...state.liveTokens);
        // A temp file only where the child died between creating and renaming it; named for it.
        expect(state.temps.length, step).toBe(LEAVES_TEMP.has(step) ? 1 : 0);
        for (const name of state.temps) {
          expect(name).toMatch(new RegExp(`^${files.safe}\\.lease\\.json\\.${agent.pid}-[0-9a-f]{8}\\.tmp$`));
          const bytes = fs.readFileSync(join(dir, name));
          if (bytes.length > 0) tokens.push(parseRecord(bytes).token); // a whole record, with the token it meant to issue
        }
        for (const token of state.liveTokens)
          expect(await isFlocked(files.live(token)), `${step}: a dead process's .live`).toBe(false);

        // Another process acquires at once, from the real record, with a greater token.
        const lease = new Lease(dir, { ttlMs: TTL, transitionTimeoutMs: 5_000 });
        const started = performance.now();
        const grant = await lease.acquire('s1', 'bob');
        expect(performance.now() - started, step).toBeLessThan(5_000); // the dead holder's flocks are gone: no TTL wait
        for (const token of tokens) expect(grant.token, `${step}: new token vs ${token}`).toBeGreaterThan(token);
        const takeover = takeovers.get(`${lease.dir}:${grant.token}`);
        if (state.record !== undefined) {
          // It took over what the record said — not what a temp file said.
          const reason =
            state.record.owner === '' ? 'released' : state.record.expiryMs <= Date.now() ? 'expired' : 'crashed';
          expect(takeover, step).toMatchObject({ previous: state.record.token, reason });
        } else {
          expect(takeover, step).toBeUndefined(); // a first acquire
        }
        // And the lease works normally from there.
        const renewed = await lease.renew(grant);
        expect(renewed.token).toBe(grant.token);
        await lease.release(renewed);
        expect(dirState(dir, files.safe).record).toMatchObject({ owner: '', token: grant.token });
        const next = await new Lease(dir, { ttlMs: TTL }).acquire('s1', 'carol');
        expect(next.token).toBeGreaterThan(grant.token);
      });
    },
  );
});

// The hand-off: the holder releases while another process waits in line, so the release renames
// the waiter's flocked .wait file to the new generation's .live and writes the record naming it.
// SIGKILL the releaser before each of those steps: whatever the step, the waiter must end up
// holding the lease at once (by adopting the hand-off if the record was written, else by taking
// over from the dead releaser), with a token greater than every token issued or attempted.
// Both this and the queued waiter's takeover below are transitions whose commit adopts a .wait.
const ADOPTING_STEPS = [
  ...LOCK,
  'read.read',
  'probe.open',
  'probe.flock',
  'adopt.rename',
  ...WRITE,
  ...DURABLE,
  'unlink',
  'commit.done',
  'unlock',
];

describe.each(filesystems)('on %s', (_fs, root) => {
  test('SIGKILL at every step of a release that hands the lease to a waiter: the waiter gets it at once', async () => {
    // Last, the close of the released .live, which wakes the waiter: after the transition lock.
    await pool([...ADOPTING_STEPS, 'close'], 3, async (step) => {
      const dir = freshDir(root);
      const files = leaseFiles(dir, 's1');
      const { holder: agent, holderToken, waiter, waiting } = await queuedBehindHolder(dir, step);
      const tokens = [holderToken];
      // Stop the waiter while the releaser dies and we look at what it left: only its files count.
      waiter.child.kill('SIGSTOP');

      await agent.must({ op: 'fault', action: 'kill', step });
      const reply = await agent.call({ op: 'release', id: 's1' });
      expect(
        reply,
        `${step}: the child should have died at the step, not answered ${JSON.stringify(reply)}`,
      ).toMatchObject({ code: 'EAGENTEXITED' });
      expect((await agent.exited).signal, step).toBe('SIGKILL');

      const state = dirState(dir, files.safe);
      expect(state.unknown, step).toEqual([]);
      tokens.push(...tokensLeft(dir, state));
      const handedOver = state.record?.owner === 'bob'; // the releaser died after writing the hand-off

      const started = performance.now();
      waiter.child.kill('SIGCONT');
      const granted = await waiting;
      expect(granted, step).toMatchObject({ ok: true, grant: { owner: 'bob' } });
      expect(performance.now() - started, step).toBeLessThan(5_000); // never the TTL (a minute)
      const token = BigInt(granted.grant!.token);
      for (const seen of tokens) {
        // Adopting the hand-off keeps the token the releaser wrote; any other way takes a greater one.
        if (handedOver && seen === state.record!.token) expect(token, step).toBe(seen);
        else expect(token, `${step}: new token vs ${seen}`).toBeGreaterThan(seen);
      }
      expect(await isFlocked(files.live(token)), step).toBe(true);
      expect(waitFiles(dir), step).toEqual([]);
      await waiter.must({ op: 'renew', id: 's1' });
      await waiter.must({ op: 'release', id: 's1' });
      expect(dirState(dir, files.safe).record).toMatchObject({ owner: '', token });
    });
  });
});

// A queued waiter's takeover: the holder dies while another process waits in line, so the waiter
// takes the lease over by renaming its own flocked .wait file to the new generation's .live and
// writing the record naming it. SIGKILL the waiter before each step of that takeover: the directory
// stays consistent, no flock of the dead waiter lingers (its adopted .live included), and a third
// process takes over at once from what the record says, with a greater token.
describe.each(filesystems)('on %s', (_fs, root) => {
  test('SIGKILL at every step of a queued waiter taking over from a dead holder: the next acquire succeeds at once', async () => {
    await pool(ADOPTING_STEPS, 3, async (step) => {
      const dir = freshDir(root);
      const files = leaseFiles(dir, 's1');
      // Queued and asleep: the next time bob reaches `step` is in his takeover.
      const { holder, holderToken, waiter, waiting } = await queuedBehindHolder(dir, step);
      const tokens = [holderToken];
      await waiter.must({ op: 'fault', action: 'kill', step });
      holder.child.kill('SIGKILL');
      await holder.exited;

      expect(await waiting, `${step}: the waiter should have died at the step`).toMatchObject({
        code: 'EAGENTEXITED',
      });
      expect((await waiter.exited).signal, step).toBe('SIGKILL');

      const state = dirState(dir, files.safe);
      expect(state.unknown, step).toEqual([]);
      if (AFTER_RENAME.has(step)) {
        expect(state.record, `${step}: died after the rename, the waiter's record must stand`).toMatchObject({
          owner: 'bob',
        });
        expect(state.record!.token, step).toBeGreaterThan(holderToken);
      } else {
        expect(state.record, `${step}: died before the rename, the holder's record must stand`).toMatchObject({
          owner: 'alice',
          token: holderToken,
        });
      }
      const waits = waitFiles(dir);
      // Renamed (the adoption), the .wait file is the new .live: none is left; before that, its own.
      const adopted = ADOPTING_STEPS.indexOf(step) > ADOPTING_STEPS.indexOf('adopt.rename');
      expect(waits.length, `${step}: .wait files ${JSON.stringify(waits)}`).toBe(adopted ? 0 : 1);
      tokens.push(...tokensLeft(dir, state));
      for (const token of state.liveTokens)
        expect(await isFlocked(files.live(token)), `${step}: a dead process's .live`).toBe(false);
      for (const name of waits) expect(await isFlocked(join(dir, name)), `${step}: a dead waiter's .wait`).toBe(false);

      const lease = new Lease(dir, { ttlMs: TTL, transitionTimeoutMs: 5_000 });
      const started = performance.now();
      const grant = await lease.acquire('s1', 'carol');
      expect(performance.now() - started, step).toBeLessThan(5_000); // the dead flocks are gone: no TTL wait
      for (const token of tokens) expect(grant.token, `${step}: new token vs ${token}`).toBeGreaterThan(token);
      expect(takeovers.get(`${lease.dir}:${grant.token}`), step).toMatchObject({
        previous: state.record!.token,
        reason: 'crashed',
      });
      await lease.release(grant);
      expect(dirState(dir, files.safe).record).toMatchObject({ owner: '', token: grant.token });
    });
  });
});
