// The lease between real processes: a killed holder is taken over at once, a live unexpired one
// never is, and a holder's children do not keep its lease alive.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, test } from 'vitest';
import { Lease } from '../src/flock/lease.js';
import { LeaseHeldError } from '../src/port/errors.js';
import { LeaseAgent } from './helpers/agent.js';
import { filesystems, freshDir } from './helpers/dirs.js';
import { isFlocked, leaseFiles, readRecordFile, snapshot } from './helpers/lease-files.js';

const TTL = 30_000;

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe.each(filesystems)('on %s', (_fs, root) => {
  test('a SIGKILLed holder is taken over by another process at once, long before its TTL', async () => {
    const dir = freshDir(root);
    const holder = await LeaseAgent.start(dir, TTL);
    const held = await holder.acquire('s1', 'alice');
    const lease = new Lease(dir, { ttlMs: TTL });
    await expect(lease.acquire('s1', 'bob')).rejects.toBeInstanceOf(LeaseHeldError);

    const killedAt = performance.now();
    holder.kill('SIGKILL');
    let grant;
    while (grant === undefined) {
      grant = await lease.acquire('s1', 'bob').catch((error: unknown) => {
        if (!(error instanceof LeaseHeldError)) throw error;
        return undefined;
      });
    }
    const takeoverMs = performance.now() - killedAt;
    // The crash is seen through the kernel dropping the flock, not by waiting out the TTL.
    expect(takeoverMs).toBeLessThan(TTL / 30);
    expect(grant.token).toBeGreaterThan(BigInt(held.token));
    expect(readRecordFile(dir, 's1')).toMatchObject({ owner: 'bob', token: grant.token });
    expect(fs.existsSync(leaseFiles(dir, 's1').live(BigInt(held.token)))).toBe(false);
  });

  test('a live, unexpired holder is never taken over, and keeps renewing', async () => {
    const dir = freshDir(root);
    const holder = await LeaseAgent.start(dir, TTL);
    const held = await holder.acquire('s1', 'alice');
    const lease = new Lease(dir, { ttlMs: TTL });
    for (let attempt = 0; attempt < 20; attempt++) {
      const before = snapshot(dir);
      await expect(lease.acquire('s1', attempt % 2 ? 'bob' : 'alice')).rejects.toBeInstanceOf(LeaseHeldError);
      expect(snapshot(dir)).toEqual(before);
      await sleep(5);
    }
    const renewed = await holder.call({ op: 'renew' });
    expect(renewed).toMatchObject({ ok: true, grant: { token: held.token } });
  });

  test('the same owner name in a new process gets no favour: a new token after the crash', async () => {
    const dir = freshDir(root);
    const holder = await LeaseAgent.start(dir, TTL);
    const held = await holder.acquire('s1', 'alice');
    await expect(new Lease(dir).acquire('s1', 'alice')).rejects.toBeInstanceOf(LeaseHeldError);
    holder.kill('SIGKILL');
    await holder.exited;
    const grant = await new Lease(dir).acquire('s1', 'alice');
    expect(grant.token).toBeGreaterThan(BigInt(held.token));
  });

  test('a child process spawned by the holder does not keep the lease alive after the holder dies', async () => {
    const dir = freshDir(root);
    const holder = await LeaseAgent.start(dir, TTL);
    const held = await holder.acquire('s1', 'alice');
    const { pid } = await holder.call({ op: 'spawn', command: 'sleep', args: ['30'] });
    try {
      holder.kill('SIGKILL');
      await holder.exited;
      expect(alive(pid!)).toBe(true); // the child lives on...
      expect(await isFlocked(leaseFiles(dir, 's1').live(BigInt(held.token)))).toBe(false); // ...without the lock
      const grant = await new Lease(dir).acquire('s1', 'bob');
      expect(grant.token).toBeGreaterThan(BigInt(held.token));
    } finally {
      process.kill(pid!, 'SIGKILL');
    }
  });
});

describe('permissions', () => {
  test('an unwritable lease dir: EACCES, nothing created', () => {
    const leaseDir = join(freshDir(), 'leases');
    fs.mkdirSync(leaseDir, { mode: 0o555 });
    const script = `import { Lease } from ${JSON.stringify(new URL('../dist/index.js', import.meta.url).href)};
      await new Lease(${JSON.stringify(leaseDir)}).acquire('s1', 'me').then(() => console.log('acquired'), (e) => console.log(e.code));`;
    // root ignores permissions: run the attempt as root without the capabilities that override them
    const asRoot = process.getuid?.() === 0;
    const command = asRoot ? 'setpriv' : process.execPath;
    const args = [
      ...(asRoot ? ['--bounding-set=-dac_override,-dac_read_search', process.execPath] : []),
      '--input-type=module',
      '-e',
      script,
    ];
    const run = spawnSync(command, args, { encoding: 'utf8' });
    expect(run.stdout.trim()).toBe('EACCES');
    expect(fs.readdirSync(leaseDir)).toEqual([]);
  });
});
