// The fenced resource the contention workers guard with their lease: one append-only log per id
// of the writes it accepted, `<dir>/<id>.log`, each line `{"token","pid","seq","at"}`. A write is
// decided under an flock of its own (`<dir>/resource.lock`, taken with fs-ext, not with the lease
// under test): it is accepted iff its token is >= the highest token accepted so far for the id —
// the last line of the log, since only accepted writes are appended — and rejected otherwise.
// One line is one write(2) on an O_APPEND descriptor, so a SIGKILL leaves whole lines only.
import fs from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import fsExt from 'fs-ext';

const TAIL = 1024;

export class FencedResource {
  /** @param {string} dir */
  constructor(dir) {
    this.dir = dir;
    fs.mkdirSync(dir, { recursive: true });
    this.lockFd = fs.openSync(join(dir, 'resource.lock'), fs.constants.O_RDWR | fs.constants.O_CREAT, 0o600);
    /** id → fd of its log */
    this.logs = new Map();
  }

  #log(id) {
    let fd = this.logs.get(id);
    if (fd === undefined) {
      fd = fs.openSync(
        join(this.dir, `${id}.log`),
        fs.constants.O_RDWR | fs.constants.O_APPEND | fs.constants.O_CREAT,
        0o600,
      );
      this.logs.set(id, fd);
    }
    return fd;
  }

  /** The highest token accepted so far for the id (the last line), or undefined. */
  #max(fd) {
    const { size } = fs.fstatSync(fd);
    if (size === 0) return undefined;
    const length = Math.min(size, TAIL);
    const buffer = Buffer.alloc(length);
    fs.readSync(fd, buffer, 0, length, size - length);
    const lines = buffer.toString('utf8').split('\n').filter(Boolean);
    return BigInt(JSON.parse(lines[lines.length - 1]).token);
  }

  /**
   * Presents a write carrying `token`. Resolves to { accepted, max, at } where `at` is the time
   * the decision was taken (inside the resource lock), or { skipped: true } when the resource lock
   * stayed busy for `waitMs` (its holder is suspended).
   */
  async write(id, token, pid, seq, waitMs = 2_000) {
    const deadline = Date.now() + waitMs;
    for (;;) {
      try {
        fsExt.flockSync(this.lockFd, 'exnb');
        break;
      } catch (error) {
        if (error.code !== 'EAGAIN' && error.code !== 'EWOULDBLOCK') throw error;
        if (Date.now() >= deadline) return { skipped: true };
        await sleep(1);
      }
    }
    try {
      const fd = this.#log(id);
      const at = Date.now();
      const max = this.#max(fd);
      const accepted = max === undefined || token >= max;
      if (accepted) fs.writeSync(fd, `${JSON.stringify({ token: String(token), pid, seq, at })}\n`);
      return { accepted, max: max === undefined ? undefined : String(max), at };
    } finally {
      fsExt.flockSync(this.lockFd, 'un');
    }
  }
}

/** Every id's accepted writes, in the order the resource accepted them. */
export function readResource(dir) {
  const out = {};
  if (!fs.existsSync(dir)) return out;
  for (const name of fs.readdirSync(dir)) {
    if (!name.endsWith('.log')) continue;
    const text = fs.readFileSync(join(dir, name), 'utf8');
    out[name.slice(0, -'.log'.length)] = text
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line));
  }
  return out;
}
