// The /proc/locks reader: who holds which lock file, without opening it.
import fs from 'node:fs';
import { join, resolve } from 'node:path';
import { liveName, safeID } from '../layout.js';

/** Exclusive flocks by file (device and inode), from /proc/locks: never opens the files. */
export class LockTable {
  readonly #holders: Map<string, number>;
  private constructor(holders: Map<string, number>) {
    this.#holders = holders;
  }

  /** undefined where the OS does not tell (no /proc/locks). */
  static read(): LockTable | undefined {
    let text: string;
    try {
      text = fs.readFileSync('/proc/locks', 'latin1');
    } catch {
      return undefined;
    }
    const holders = new Map<string, number>();
    // "1: FLOCK  ADVISORY  WRITE 4515 fe:00:2146323 0 EOF"; blocked requests read "1: -> FLOCK ...".
    const LINE = /^\d+:\s+FLOCK\s+\S+\s+WRITE\s+(\d+)\s+([0-9a-f]+):([0-9a-f]+):(\d+)\s/gm;
    for (const m of text.matchAll(LINE)) {
      holders.set(`${parseInt(m[2]!, 16)}:${parseInt(m[3]!, 16)}:${m[4]}`, Number(m[1]));
    }
    return new LockTable(holders);
  }

  /**
   * Who holds `path` exclusively: `{ locked: false }`, `{ locked: true, pid }` (pid 0 from /proc
   * means a process outside our pid namespace: locked, pid unknown), or `undefined` if it is gone.
   */
  lookup(path: string): { locked: boolean; pid: number | undefined } | undefined {
    let st: fs.BigIntStats;
    try {
      st = fs.lstatSync(path, { bigint: true });
    } catch {
      return undefined;
    }
    const dev = st.dev;
    // glibc's major()/minor() of st_dev, as /proc/locks prints them (hex).
    const major = ((dev >> 8n) & 0xfffn) | ((dev >> 32n) & 0xfffff000n);
    const minor = (dev & 0xffn) | ((dev >> 12n) & 0xffffff00n);
    const pid = this.#holders.get(`${major}:${minor}:${st.ino}`);
    if (pid === undefined) return { locked: false, pid: undefined };
    return { locked: true, pid: pid > 0 ? pid : undefined };
  }
}

/** The process holding the current generation's liveness lock of `id`, where the OS tells. */
export function holderPid(dir: string, id: string, token: bigint): number | undefined {
  return LockTable.read()?.lookup(join(resolve(dir), liveName(safeID(id), token)))?.pid;
}
