// Regression (found by the torture suite's I/O-fault matrix): errnos that libuv has no name for
// reached callers as `code: 'Unknown system error -37'`, so a file system without flock support
// (ENOLCK: NFS without lockd) was not reported as LeaseUnsupportedError, and a full disk quota was
// not EDQUOT. The addon now names them.
import { afterEach, expect, test } from 'vitest';
import { faults } from '../../src/flock/io.js';
import { Lease } from '../../src/flock/lease.js';
import { LeaseUnsupportedError } from '../../src/port/errors.js';
import { freshDir } from '../helpers/dirs.js';

afterEach(() => faults.clear());

test.each(['lock.flock', 'live.flock'])('flock failing with ENOLCK at %s is LeaseUnsupportedError', async (step) => {
  faults.fail(step, 'ENOLCK');
  const error = await new Lease(freshDir()).acquire('s1', 'alice').catch((e: unknown) => e);
  expect(error).toBeInstanceOf(LeaseUnsupportedError);
  expect(error).toMatchObject({ code: 'ELEASEUNSUPPORTED', cause: { code: 'ENOLCK', syscall: 'flock' } });
});

test.each([
  ['EDQUOT', /quota/i],
  ['ESTALE', /stale/i],
  ['EDEADLK', /deadlock/i],
])('%s keeps its name and its description', async (code, description) => {
  faults.fail('temp.write', code);
  const error = await new Lease(freshDir()).acquire('s1', 'alice').catch((e: unknown) => e);
  expect(error).toMatchObject({ code, syscall: 'write' });
  expect((error as Error).message).toMatch(description);
});
