// A process suspended in the middle of an operation, holding the id's transition lock: it stops
// itself at a named fault point (faults.stop(step) raises SIGSTOP just before that system call —
// on a libuv worker thread for the disk commit, on the main thread on tmpfs). Everyone else must
// time out (LeaseTimeoutError) or abort (AbortSignal) cleanly instead of hanging, and must proceed
// once the suspended process resumes (its operation completes) or dies (the kernel drops its
// flocks).
import fs from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, test } from 'vitest';
import { filesystems, freshDir } from '../helpers/dirs.js';
import { isFlocked, leaseFiles } from '../helpers/lease-files.js';
import { Agent, dirState } from './harness.js';

const TTL = 60_000;
const SHORT = 250; // the competitors' transitionTimeoutMs

/** [operation, step it stops before, whether the record is already replaced at that point] */
const STOPS: Array<[op: 'acquire' | 'renew' | 'release', step: string, committed: boolean]> = [
  ['acquire', 'live.flock', false],
  ['acquire', 'rename', false],
  ['acquire', 'dir.fsync', true],
  ['acquire', 'commit.done', true],
  ['renew', 'temp.write', false],
  ['renew', 'dir.fsync', true],
  ['release', 'rename', false],
  ['release', 'unlink', true],
];

describe.each(filesystems)('on %s', (_fs, root) => {
  /** Starts an agent and leaves it stopped at `step` inside `op`, holding the transition lock. */
  async function stoppedMidOperation(dir: string, op: string, step: string, committed: boolean) {
    const agent = await Agent.start(dir, { ttlMs: TTL });
    if (op !== 'acquire') await agent.acquire('s1', 'alice');
    const record = leaseFiles(dir, 's1').record;
    const before = fs.existsSync(record) ? fs.readFileSync(record, 'latin1') : undefined;
    await agent.must({ op: 'fault', action: 'stop', step });
    const pending = agent.call(op === 'acquire' ? { op, id: 's1', owner: 'alice' } : { op, id: 's1' });
    await agent.stopped();
    expect(await isFlocked(leaseFiles(dir, 's1').lock)).toBe(true); // it holds the transition lock
    // The record is replaced whole or not at all: before the rename it is the old one.
    const during = fs.existsSync(record) ? fs.readFileSync(record, 'latin1') : undefined;
    if (committed) expect(during).not.toBe(before);
    else expect(during).toBe(before);
    return { agent, pending };
  }

  test.each(STOPS)(
    'stopped inside %s before %s: others time out or abort cleanly; after SIGCONT the operation completes and they proceed',
    async (op, step, committed) => {
      const dir = freshDir(root);
      const { agent, pending } = await stoppedMidOperation(dir, op, step, committed);
      const [competitor, patient] = await Promise.all([
        Agent.start(dir, { ttlMs: TTL, transitionTimeoutMs: SHORT }),
        Agent.start(dir, { ttlMs: TTL, transitionTimeoutMs: 30_000 }),
      ]);

      // Others time out instead of hanging...
      const reply = await competitor.call({ op: 'acquire', id: 's1', owner: 'bob' });
      expect(reply).toMatchObject({ ok: false, code: 'ELEASETIMEOUT', name: 'LeaseTimeoutError' });
      expect(reply.settled - reply.started).toBeGreaterThanOrEqual(SHORT - 5);
      expect(reply.settled - reply.started).toBeLessThan(SHORT + 5_000);
      // ...while other ids are not held up at all (with the same short timeout, every call succeeds).
      await competitor.must({ op: 'acquire', id: 's2', owner: 'bob' });
      await competitor.must({ op: 'renew', id: 's2' });
      await competitor.must({ op: 'release', id: 's2' });
      // An AbortSignal ends the wait with its reason, long before the transition timeout would.
      const aborted = await patient.call({ op: 'acquire', id: 's1', owner: 'carol', abortAfterMs: 100 });
      expect(aborted).toMatchObject({ ok: false, code: 'EGAVEUP', message: 'the caller gave up' });
      expect(aborted.settled - aborted.started).toBeLessThan(5_000);
      expect(agent.state()).toBe('T'); // all of that while the holder of the transition lock stayed stopped

      // A waiter that does not give up is served as soon as the stopped process resumes.
      const waiting = patient.call({ op: 'acquire', id: 's1', owner: 'carol' });
      await sleep(50);
      agent.signal('SIGCONT');
      expect(await pending).toMatchObject({ ok: true });
      const served = await waiting;
      if (op === 'release') {
        expect(served).toMatchObject({ ok: true, grant: { owner: 'carol' } }); // the release completed: free
      } else {
        expect(served).toMatchObject({ ok: false, code: 'ELEASEHELD', holder: { owner: 'alice' } }); // alice holds it, alive
        expect(await agent.must({ op: 'renew', id: 's1' })).toMatchObject({ grant: { owner: 'alice' } });
      }
      const state = dirState(dir, leaseFiles(dir, 's1').safe);
      expect(state.temps).toEqual([]);
    },
  );

  test.each(STOPS)(
    'stopped inside %s before %s, then SIGKILLed: a waiting competitor takes over at once',
    async (op, step, committed) => {
      const dir = freshDir(root);
      const { agent, pending } = await stoppedMidOperation(dir, op, step, committed);
      const before = dirState(dir, leaseFiles(dir, 's1').safe);
      const competitor = await Agent.start(dir, { ttlMs: TTL, transitionTimeoutMs: 30_000 });
      const waiting = competitor.call({ op: 'acquire', id: 's1', owner: 'bob' });
      await sleep(50);
      const killedAt = agent.signal('SIGKILL');
      expect(await pending).toMatchObject({ ok: false, code: 'EAGENTEXITED' });
      const taken = await waiting;
      expect(taken).toMatchObject({ ok: true, grant: { owner: 'bob' } });
      expect(taken.settled - killedAt).toBeLessThan(2_000); // not the 30 s transition timeout, not the 60 s TTL
      // Whatever the dead process had issued, the new token is greater.
      const issued = [...before.liveTokens, ...(before.record ? [before.record.token] : [])];
      for (const token of issued) expect(BigInt(taken.grant!.token)).toBeGreaterThan(token);
      const after = dirState(dir, leaseFiles(dir, 's1').safe);
      expect(after.record).toMatchObject({ owner: 'bob', token: BigInt(taken.grant!.token) });
      // A temp file exists only if the process died between writing it and renaming it.
      expect(after.temps.length).toBe(step === 'temp.write' || step === 'rename' ? 1 : 0);
      for (const name of after.temps)
        expect(name).toMatch(new RegExp(`\\.lease\\.json\\.${agent.pid}-[0-9a-f]+\\.tmp$`));
      expect(fs.existsSync(leaseFiles(dir, 's1').lock)).toBe(true);
    },
  );
});
