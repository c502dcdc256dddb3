import fs from 'node:fs';
import { join } from 'node:path';
import { liveName, lockName, recordName, safeID } from '../../src/flock/layout.js';
import { formatRecord, parseRecord, type LeaseRecord } from '../../src/flock/record.js';

/** Paths of one id's files in a lease dir. */
export function leaseFiles(dir: string, id: string) {
  const safe = safeID(id);
  return {
    safe,
    lock: join(dir, lockName(safe)),
    record: join(dir, recordName(safe)),
    live: (token: bigint) => join(dir, liveName(safe, token)),
  };
}

/** The `.wait` files of queued waiters in a lease dir. */
export const waitFiles = (dir: string): string[] => fs.readdirSync(dir).filter((name) => name.endsWith('.wait'));

export function writeRecordFile(dir: string, id: string, record: LeaseRecord): void {
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  fs.writeFileSync(leaseFiles(dir, id).record, formatRecord(record), { mode: 0o600 });
}

export function readRecordFile(dir: string, id: string): LeaseRecord {
  return parseRecord(fs.readFileSync(leaseFiles(dir, id).record));
}

/** Every file in the directory with its bytes, to prove an operation changed nothing. */
export function snapshot(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of fs.readdirSync(dir).sort()) {
    const path = join(dir, name);
    const stat = fs.lstatSync(path);
    out[name] = stat.isSymbolicLink()
      ? `-> ${fs.readlinkSync(path)}`
      : stat.isFile()
        ? fs.readFileSync(path, 'latin1')
        : '<dir>';
  }
  return out;
}

/** Is some open file description holding a flock on this file? (probed with a fresh fd) */
export async function isFlocked(path: string): Promise<boolean> {
  const { flockSync } = (await import('fs-ext')).default;
  const fd = fs.openSync(path, 'r');
  try {
    flockSync(fd, 'exnb');
    return false;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EAGAIN') return true;
    throw error;
  } finally {
    fs.closeSync(fd);
  }
}

/** This process's open descriptors that point at `path`. */
export function fdsOf(path: string): number[] {
  const fds: number[] = [];
  for (const fd of fs.readdirSync('/proc/self/fd')) {
    try {
      if (fs.readlinkSync(`/proc/self/fd/${fd}`).startsWith(path)) fds.push(Number(fd));
    } catch {
      // closed while we looked
    }
  }
  return fds;
}

export function openFdCount(): number {
  return fs.readdirSync('/proc/self/fd').length;
}
