// Real signals on real holder processes, on disk and on tmpfs: SIGKILL (the crash takeover, timed),
// SIGSTOP past the TTL and SIGCONT (reclaim, loss to a successor, loss after a successor's
// release), and a live-but-hung holder with an unexpired lease.
import fs from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, test } from 'vitest';
import { filesystems, freshDir } from '../helpers/dirs.js';
import { isFlocked, leaseFiles, readRecordFile } from '../helpers/lease-files.js';
import { until } from '../helpers/until.js';
import { Agent, percentile, type Reply } from './harness.js';

const events = async (agent: Agent): Promise<Array<Record<string, unknown>>> =>
  (await agent.must({ op: 'events' })).events!;
const recordBytes = (dir: string, id: string): string => fs.readFileSync(leaseFiles(dir, id).record, 'latin1');

describe.each(filesystems)('on %s', (fsName, root) => {
  test('SIGKILL a holder: a process spinning on acquire takes over within milliseconds, thousands of times sooner than the TTL', async () => {
    const TTL = 30_000;
    const dir = freshDir(root);
    const survivor = await Agent.start(dir, { ttlMs: TTL });
    const latencies: number[] = [];
    let previous = 0n;
    for (let round = 0; round < 6; round++) {
      const holder = await Agent.start(dir, { ttlMs: TTL });
      const held = await holder.acquire('s1', `holder-${round}`);
      expect(BigInt(held.token)).toBeGreaterThan(previous);
      const spinning = survivor.call({ op: 'spin', id: 's1', owner: 'survivor', maxMs: 10_000 });
      // The survivor is refused while the holder lives: seen before the kill.
      let refusedBefore: number | undefined;
      await until(
        async () => (refusedBefore = (await survivor.must({ op: 'refused' })).refusedUntil) !== undefined,
        'the survivor refused',
        10_000,
      );
      expect(holder.state()).not.toBe('Z');
      const killedAt = holder.signal('SIGKILL');
      const reply = await spinning;
      expect(reply).toMatchObject({ ok: true });
      expect(reply.refusedUntil).toBeGreaterThanOrEqual(refusedBefore!); // it really was refused up to the kill
      latencies.push(reply.at! - killedAt);
      const token = BigInt(reply.grant!.token);
      expect(token).toBeGreaterThan(BigInt(held.token));
      expect(readRecordFile(dir, 's1')).toMatchObject({ owner: 'survivor', token });
      expect(fs.existsSync(leaseFiles(dir, 's1').live(BigInt(held.token)))).toBe(false);
      expect(await holder.exited).toMatchObject({ signal: 'SIGKILL' });
      const takeovers = (await events(survivor)).filter((e) => e.channel === 'takeover');
      expect(takeovers.at(-1)).toMatchObject({ reason: 'crashed', previous: { token: held.token } });
      await survivor.must({ op: 'release', id: 's1' });
      previous = token;
    }
    latencies.sort((a, b) => a - b);
    console.log(
      `[torture] crash takeover on ${fsName}: kill → survivor's acquire returned: p50 ${percentile(latencies, 50).toFixed(2)} ms, max ${latencies.at(-1)!.toFixed(2)} ms (TTL ${TTL} ms; ${latencies.length} kills)`,
    );
    // "Tiny next to the TTL": typically a few ms; the bound leaves room for a loaded CI box.
    expect(latencies.at(-1)!).toBeLessThan(TTL / 30);
  });

  describe('SIGSTOP a holder past its TTL, then SIGCONT', () => {
    const TTL = 300;

    test('(a) nobody competed: its renew reclaims the lease — same token, fresh expiry', async () => {
      const dir = freshDir(root);
      const holder = await Agent.start(dir, { ttlMs: TTL });
      const held = await holder.acquire('s1', 'alice');
      holder.signal('SIGSTOP');
      await holder.stopped();
      await sleep(TTL * 2.5);
      expect(Date.now()).toBeGreaterThan(held.expiry);
      const resumedAt = Date.now();
      holder.signal('SIGCONT');
      const renewed = await holder.must({ op: 'renew', id: 's1' });
      expect(renewed.grant).toMatchObject({ owner: 'alice', token: held.token });
      expect(renewed.grant!.expiry).toBeGreaterThanOrEqual(resumedAt + TTL);
      expect(readRecordFile(dir, 's1')).toMatchObject({
        owner: 'alice',
        token: BigInt(held.token),
        expiryMs: renewed.grant!.expiry,
      });
      expect(await isFlocked(leaseFiles(dir, 's1').live(BigInt(held.token)))).toBe(true);
      expect((await events(holder)).filter((e) => e.channel === 'reclaim')).toEqual([
        expect.objectContaining({ grant: renewed.grant, expiredAt: held.expiry }),
      ]);
    });

    test("(b) a competitor took over meanwhile: its renew fails with LeaseHeldError, and the competitor's lease is untouched", async () => {
      const dir = freshDir(root);
      const holder = await Agent.start(dir, { ttlMs: TTL });
      const competitor = await Agent.start(dir, { ttlMs: 60_000 });
      const held = await holder.acquire('s1', 'alice');
      holder.signal('SIGSTOP');
      await holder.stopped();
      const taken = await competitor.must({ op: 'spin', id: 's1', owner: 'bob', pollMs: 5 });
      expect(taken.at!).toBeGreaterThanOrEqual(held.expiry); // not a moment before alice's expiry
      expect(BigInt(taken.grant!.token)).toBeGreaterThan(BigInt(held.token));
      const theirs = recordBytes(dir, 's1');
      holder.signal('SIGCONT');
      const renew = await holder.call({ op: 'renew', id: 's1' });
      expect(renew).toMatchObject({
        ok: false,
        code: 'ELEASEHELD',
        name: 'LeaseHeldError',
        holder: { owner: 'bob', token: taken.grant!.token },
      });
      // The loser let go of its generation (its descriptor is closed) and touched nothing of bob's.
      expect(holder.fdTargets().filter((t) => t.includes('.live'))).toEqual([]);
      expect(await holder.call({ op: 'renew', id: 's1' })).toMatchObject({ ok: false, code: 'ELEASEHELD' });
      expect(await holder.call({ op: 'release', id: 's1' })).toMatchObject({ ok: true }); // a no-op
      expect(recordBytes(dir, 's1')).toBe(theirs);
      expect(await isFlocked(leaseFiles(dir, 's1').live(BigInt(taken.grant!.token)))).toBe(true);
      expect(await competitor.must({ op: 'renew', id: 's1' })).toMatchObject({
        grant: { owner: 'bob', token: taken.grant!.token },
      });
      const loss = (await events(holder)).filter((e) => e.channel === 'loss' || e.channel === 'reclaim');
      expect(loss[0]).toMatchObject({
        channel: 'loss',
        token: held.token,
        holder: { owner: 'bob', token: taken.grant!.token },
      });
    });

    test('(c) a competitor took over and released: still a loss, not a reclaim', async () => {
      const dir = freshDir(root);
      const holder = await Agent.start(dir, { ttlMs: TTL });
      const competitor = await Agent.start(dir, { ttlMs: 60_000 });
      await holder.acquire('s1', 'alice');
      holder.signal('SIGSTOP');
      await holder.stopped();
      const taken = await competitor.must({ op: 'spin', id: 's1', owner: 'bob', pollMs: 5 });
      await competitor.must({ op: 'release', id: 's1' });
      const tombstone = recordBytes(dir, 's1');
      expect(readRecordFile(dir, 's1')).toMatchObject({ owner: '', token: BigInt(taken.grant!.token) });
      holder.signal('SIGCONT');
      const renew = await holder.call({ op: 'renew', id: 's1' });
      expect(renew).toMatchObject({ ok: false, code: 'ELEASEHELD', holder: { owner: '', token: taken.grant!.token } });
      expect(recordBytes(dir, 's1')).toBe(tombstone);
      const seen = (await events(holder)).map((e) => e.channel);
      expect(seen).toContain('loss');
      expect(seen).not.toContain('reclaim');
      // Acquiring again is a takeover of the tombstone: a new, greater token — never the old one back.
      const again = await holder.acquire('s1', 'alice');
      expect(BigInt(again.token)).toBeGreaterThan(BigInt(taken.grant!.token));
    });
  });

  test('a live but hung (SIGSTOPped) holder with an unexpired lease: competitors get LeaseHeldError until the expiry, then take over without waiting for it', async () => {
    const TTL = 1_500;
    const dir = freshDir(root);
    const holder = await Agent.start(dir, { ttlMs: TTL });
    const competitor = await Agent.start(dir, { ttlMs: 60_000 });
    const held = await holder.acquire('s1', 'alice');
    holder.signal('SIGSTOP');
    await holder.stopped();
    const taken: Reply = await competitor.must({ op: 'spin', id: 's1', owner: 'bob', pollMs: 5, maxMs: 20_000 });
    expect(holder.state()).toBe('T'); // still hung: the takeover did not wait for the process
    expect(taken.attempts!).toBeGreaterThan(10); // refused over and over while the lease was unexpired...
    expect(taken.refusedUntil!).toBeGreaterThan(held.expiry - 200); // ...right up to the expiry
    expect(taken.at!).toBeGreaterThanOrEqual(held.expiry); // never before it
    expect(taken.at! - held.expiry).toBeLessThan(TTL); // and soon after it
    expect((await events(competitor)).filter((e) => e.channel === 'takeover')).toEqual([
      expect.objectContaining({ reason: 'expired', previous: { owner: 'alice', token: held.token } }),
    ]);
    holder.signal('SIGCONT');
    expect(await holder.call({ op: 'renew', id: 's1' })).toMatchObject({ ok: false, code: 'ELEASEHELD' });
    expect(readRecordFile(dir, 's1')).toMatchObject({ owner: 'bob', token: BigInt(taken.grant!.token) });
  });
});
