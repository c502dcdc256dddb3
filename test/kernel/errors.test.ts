import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { CodedError } from '../../src/kernel/errors.js';

class BoomError extends CodedError {
  readonly code = 'EBOOM';
}
class BangError extends BoomError {}
class OtherError extends CodedError {
  readonly code = 'EOTHER';
}

describe('CodedError', () => {
  it('names, codes and instanceof along the class chain', () => {
    const bang = new BangError('bang', { cause: 1 });
    expect(bang.name).toBe('BangError');
    expect(bang.code).toBe('EBOOM');
    expect(bang.cause).toBe(1);
    expect(bang).toBeInstanceOf(Error);
    expect(bang).toBeInstanceOf(CodedError);
    expect(bang).toBeInstanceOf(BoomError);
    expect(bang).toBeInstanceOf(BangError);
    expect(new BoomError('x')).not.toBeInstanceOf(BangError);
    expect(bang).not.toBeInstanceOf(OtherError);
    for (const value of [undefined, null, 1, 'EBOOM', {}, new Error('plain')]) {
      expect(value instanceof CodedError).toBe(false);
    }
  });

  describe('across two installed copies', () => {
    const dir = mkdtempSync(join(tmpdir(), 'kernel-copy-'));
    afterAll(() => rmSync(dir, { recursive: true, force: true }));

    it("an error from one copy is an instance of the other copy's classes", async () => {
      // A second copy of the built kernel, as a second install of the package would have it.
      cpSync(join(import.meta.dirname, '../../dist/kernel'), dir, { recursive: true });
      const copy = (await import(
        pathToFileURL(join(dir, 'errors.js')).href
      )) as typeof import('../../src/kernel/errors.js');
      expect(copy.CodedError).not.toBe(CodedError);
      class CopyBoomError extends copy.CodedError {
        readonly code = 'EBOOM';
      }
      Object.defineProperty(CopyBoomError, 'name', { value: 'BoomError' });
      const fromCopy = new CopyBoomError('from the other copy');
      expect(fromCopy).toBeInstanceOf(CodedError);
      expect(fromCopy).toBeInstanceOf(BoomError);
      expect(new BangError('here')).toBeInstanceOf(copy.CodedError);
      expect(new BangError('here')).toBeInstanceOf(CopyBoomError);
      expect(new OtherError('here')).not.toBeInstanceOf(CopyBoomError);
    });
  });
});
