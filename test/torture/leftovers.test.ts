// Leftovers of every kind in the lease directory change nothing about correctness: the same
// protocol — acquire, refusal, renew, SIGKILL and crash takeover, release and takeover of the
// tombstone, SIGSTOP past the TTL and expiry takeover, loss — run by real processes gives exactly
// the same outcomes in a clean directory and in one littered with stale .live files (with greater
// and smaller tokens, a symlink), temp files (one holding a complete, valid record that names a
// ghost with a huge token), records of other ids (one corrupt), unknown files, a FIFO and a
// subdirectory. The lease never takes a leftover for its record and leaves them as they were.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, test } from 'vitest';
import { formatRecord } from '../../src/flock/record.js';
import { filesystems, freshDir } from '../helpers/dirs.js';
import { leaseFiles, readRecordFile, snapshot } from '../helpers/lease-files.js';
import { Agent } from './harness.js';

const SHORT_TTL = 300;
const LONG_TTL = 60_000;

function plantLeftovers(dir: string): void {
  const { safe } = leaseFiles(dir, 's1');
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const ghost = formatRecord({ owner: 'ghost', token: 1n << 63n, expiryMs: Date.UTC(9999, 0, 1), session: 's1' });
  const files: Record<string, string> = {
    [`${safe}.999999999999999999.live`]: '', // a stale generation with a token greater than any we will issue
    [`${safe}.1.live`]: '', // and one smaller
    [`${safe}.lease.json.4242-deadbeef.tmp`]: ghost, // a whole record left by a writer that died before its rename
    [`${safe}.lease.json.4243-00000000.tmp`]: '', // one that died before writing
    [`${safe}.lease.json.4244-0badf00d.tmp`]: '{"owner":"gho', // one that died mid-write
    [`${safe}.lease.json.bak`]: ghost, // an operator's backup
    [`${safe}.lock.old`]: 'x',
    'other-0123456789abcdef.lease.json': '{not json', // another id's corrupt record
    'other-0123456789abcdef.5.live': '',
    'notes.txt': 'hello',
    '.hidden': '',
  };
  for (const [name, text] of Object.entries(files)) fs.writeFileSync(join(dir, name), text, { mode: 0o600 });
  fs.symlinkSync('/etc/passwd', join(dir, `${safe}.7.live`));
  fs.mkdirSync(join(dir, 'junk'));
  fs.writeFileSync(join(dir, 'junk', `${safe}.lease.json`), ghost);
  expect(spawnSync('mkfifo', [join(dir, 'fifo')]).status).toBe(0);
}

/** The protocol; returns what happened, with tokens replaced by their order of issue. */
async function protocol(dir: string): Promise<unknown[]> {
  const outcomes: unknown[] = [];
  const tokens: bigint[] = [];
  const rank = (token: string): number => {
    const value = BigInt(token);
    if (!tokens.includes(value)) {
      expect(tokens.every((t) => value > t)).toBe(true); // every new token is greater than all before
      tokens.push(value);
    }
    return tokens.indexOf(value);
  };
  const note = (
    step: string,
    reply: {
      ok: boolean;
      code?: string;
      grant?: { token: string; owner: string };
      holder?: { owner: string; token: string };
    },
  ) =>
    outcomes.push({
      step,
      ok: reply.ok,
      code: reply.code,
      owner: reply.grant?.owner,
      token: reply.grant && rank(reply.grant.token),
      holder: reply.holder && { owner: reply.holder.owner, token: rank(reply.holder.token) },
    });
  const record = () => {
    const r = readRecordFile(dir, 's1');
    return { owner: r.owner, token: rank(String(r.token)) };
  };

  const [a, b, c] = await Promise.all([
    Agent.start(dir, { ttlMs: LONG_TTL }),
    Agent.start(dir, { ttlMs: LONG_TTL }),
    Agent.start(dir, { ttlMs: SHORT_TTL }),
  ]);
  note('a acquires', await a.call({ op: 'acquire', id: 's1', owner: 'alice' }));
  note('b is refused', await b.call({ op: 'acquire', id: 's1', owner: 'bob' }));
  note('a renews', await a.call({ op: 'renew', id: 's1' }));
  outcomes.push({ record: record() });
  const spinning = b.call({ op: 'spin', id: 's1', owner: 'bob' });
  await sleep(20);
  a.signal('SIGKILL');
  note('b takes over the killed a', await spinning);
  note('b releases', await b.call({ op: 'release', id: 's1' }));
  outcomes.push({ record: record() });
  note('c takes over the tombstone', await c.call({ op: 'acquire', id: 's1', owner: 'carol' }));
  c.signal('SIGSTOP');
  await c.stopped();
  note(
    'b takes over the suspended c after its expiry',
    await b.call({ op: 'spin', id: 's1', owner: 'bob', pollMs: 5 }),
  );
  c.signal('SIGCONT');
  note('c wakes and has lost it', await c.call({ op: 'renew', id: 's1' }));
  outcomes.push({ record: record() });
  note('b renews', await b.call({ op: 'renew', id: 's1' }));
  note('b releases', await b.call({ op: 'release', id: 's1' }));
  outcomes.push({ record: record() });
  const events = (agent: Agent) =>
    agent.must({ op: 'events' }).then((r) => r.events!.filter((e) => e.channel === 'takeover').map((e) => e.reason));
  outcomes.push({ takeovers: { b: await events(b), c: await events(c) } });
  return outcomes;
}

describe.each(filesystems)('on %s', (_fs, root) => {
  test('leftovers of every kind change nothing: the same protocol gives the same outcomes as in a clean directory', async () => {
    const clean = freshDir(root);
    const littered = freshDir(root);
    plantLeftovers(littered);
    const planted = snapshot(littered);

    const expected = await protocol(clean);
    const actual = await protocol(littered);
    // What the clean directory gives (so that two equally broken runs cannot pass):
    expect(expected).toEqual([
      { step: 'a acquires', ok: true, owner: 'alice', token: 0 },
      { step: 'b is refused', ok: false, code: 'ELEASEHELD', holder: { owner: 'alice', token: 0 } },
      { step: 'a renews', ok: true, owner: 'alice', token: 0 },
      { record: { owner: 'alice', token: 0 } },
      { step: 'b takes over the killed a', ok: true, owner: 'bob', token: 1 },
      { step: 'b releases', ok: true },
      { record: { owner: '', token: 1 } },
      { step: 'c takes over the tombstone', ok: true, owner: 'carol', token: 2 },
      { step: 'b takes over the suspended c after its expiry', ok: true, owner: 'bob', token: 3 },
      { step: 'c wakes and has lost it', ok: false, code: 'ELEASEHELD', holder: { owner: 'bob', token: 3 } },
      { record: { owner: 'bob', token: 3 } },
      { step: 'b renews', ok: true, owner: 'bob', token: 3 },
      { step: 'b releases', ok: true },
      { record: { owner: '', token: 3 } },
      { takeovers: { b: ['crashed', 'expired'], c: ['released'] } },
    ]);
    expect(actual).toEqual(expected);

    // The leftovers are as they were: nothing was taken for a record, deleted or rewritten.
    const after = snapshot(littered);
    for (const [name, content] of Object.entries(planted)) expect(after[name], name).toBe(content);
    expect(readRecordFile(littered, 's1').owner).toBe(''); // released by bob, never 'ghost'
  });
});
