/**
 * The token high-water mark (`ticketing serve --state-file`): makes "a token is never reused, not
 * even across restarts" hold when the wall clock steps back, too.
 *
 * Without a state file, tokens are max(last + 1, wall-clock µs): a restarted server starts above
 * everything its predecessor issued as long as the clock did not step back (and the predecessor
 * never ran ahead of the clock by more than the restart took). With one, the file holds a mark H
 * that no token issued so far exceeds: a new server starts above H whatever the clock says. H is
 * reserved ahead (by `reserveMs` worth of µs) so the file is rewritten rarely and off the hot
 * path; a reply carrying a token above the durable H is never sent (`cover` writes synchronously
 * first, which only happens if the asynchronous top-up fell behind).
 *
 * Writes are atomic: temp file, fsync, rename, fsync of the directory.
 */
import fs from 'node:fs';
import { dirname } from 'node:path';
import { MAX_TOKEN, TOKEN_RESERVE_MS, markAhead, reservationLow } from '#kernel';

const FORMAT_VERSION = 1;

export interface TokenStoreOptions {
  /** How far ahead of the clock (ms worth of µs tokens) each write reserves. Default
   * `TOKEN_RESERVE_MS` (60 s). */
  readonly reserveMs?: number;
  /** Wall clock, epoch ms. */
  readonly clock?: () => number;
}

export class TokenStore {
  readonly path: string;
  /** Every token issued by earlier processes is ≤ this: issue only greater ones. */
  readonly floor: bigint;
  readonly #reserve: bigint;
  readonly #clock: () => number;
  #durable: bigint;
  #writing: Promise<void> | undefined;
  #tmpSeq = 0;
  /** The last asynchronous write's failure, reported once by `takeError`. */
  #error: unknown;

  private constructor(path: string, floor: bigint, reserveMs: number, clock: () => number) {
    this.path = path;
    this.floor = floor;
    this.#durable = floor;
    this.#reserve = BigInt(Math.ceil(reserveMs * 1000));
    this.#clock = clock;
  }

  /** Reads the mark (a missing file means a first start: floor 0) and reserves ahead of it. */
  static open(path: string, options: TokenStoreOptions = {}): TokenStore {
    const reserveMs = options.reserveMs ?? TOKEN_RESERVE_MS;
    if (!(reserveMs > 0 && Number.isFinite(reserveMs)))
      throw new RangeError('reserveMs must be a finite positive number');
    const clock = options.clock ?? Date.now;
    let floor = 0n;
    let text: string | undefined;
    try {
      text = fs.readFileSync(path, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
    if (text !== undefined) floor = parseStateFile(text, path);
    const store = new TokenStore(path, floor, reserveMs, clock);
    store.#writeSync(store.#target(floor));
    return store;
  }

  /** Tokens up to this are covered by the file on disk. */
  get durable(): bigint {
    return this.#durable;
  }

  /**
   * Makes sure tokens up to `upTo` are covered, writing synchronously if not. Called before any
   * reply that carries a token leaves the server; normally a no-op (the top-up keeps ahead).
   */
  cover(upTo: bigint): void {
    if (upTo <= this.#durable) return;
    this.#writeSync(this.#target(upTo));
  }

  #writeSync(mark: bigint): void {
    writeAtomicSync(this.path, this.#tmpName(), formatStateFile(mark));
    this.#durable = mark;
  }

  /** Tops the reservation up in the background when less than half of it is left. */
  topUp(lastToken: bigint): void {
    if (this.#writing !== undefined || !reservationLow(this.#durable, lastToken, this.#clock(), this.#reserve)) return;
    const mark = this.#target(lastToken);
    this.#writing = this.#writeAsync(mark).finally(() => {
      this.#writing = undefined;
    });
  }

  /** The error of a failed background write, once (the next `cover` writes synchronously). */
  takeError(): unknown {
    const error = this.#error;
    this.#error = undefined;
    return error;
  }

  /** Waits for a background write in flight. */
  async settle(): Promise<void> {
    await this.#writing;
  }

  #target(upTo: bigint): bigint {
    return markAhead(upTo, this.#clock(), this.#reserve);
  }

  #tmpName(): string {
    return `${this.path}.tmp-${process.pid}-${this.#tmpSeq++}`;
  }

  async #writeAsync(mark: bigint): Promise<void> {
    const tmp = this.#tmpName();
    try {
      const handle = await fs.promises.open(tmp, 'w', 0o600);
      try {
        await handle.writeFile(formatStateFile(mark));
        await handle.sync();
      } finally {
        await handle.close();
      }
      // Check-and-rename in one synchronous step: a synchronous `cover` that wrote a higher mark
      // meanwhile must never be overwritten by this lower one.
      if (this.#durable >= mark) {
        fs.rmSync(tmp, { force: true });
        return;
      }
      fs.renameSync(tmp, this.path);
      await fsyncDir(dirname(this.path));
      if (mark > this.#durable) this.#durable = mark;
    } catch (error) {
      fs.rmSync(tmp, { force: true });
      this.#error = error;
    }
  }
}

export function formatStateFile(mark: bigint): string {
  return `${JSON.stringify({ version: FORMAT_VERSION, highWater: mark.toString() })}\n`;
}

/** Strict: a state file we cannot read is an error, never "start from 0" (that could reuse tokens). */
export function parseStateFile(text: string, path: string): bigint {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new Error(`state file ${path} is not valid JSON; refusing to start (tokens could be reused)`, {
      cause: error,
    });
  }
  const record = value as { version?: unknown; highWater?: unknown } | null;
  if (
    typeof record !== 'object' ||
    record === null ||
    record.version !== FORMAT_VERSION ||
    typeof record.highWater !== 'string' ||
    !/^(?:0|[1-9][0-9]{0,19})$/.test(record.highWater) ||
    BigInt(record.highWater) > MAX_TOKEN
  ) {
    throw new Error(`state file ${path} is not a ticketing state file (version ${FORMAT_VERSION}); refusing to start`);
  }
  return BigInt(record.highWater);
}

function writeAtomicSync(path: string, tmp: string, data: string): void {
  const fd = fs.openSync(tmp, 'w', 0o600);
  try {
    fs.writeFileSync(fd, data);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  try {
    fs.renameSync(tmp, path);
  } catch (error) {
    fs.rmSync(tmp, { force: true });
    throw error;
  }
  const dir = fs.openSync(dirname(path), 'r');
  try {
    fs.fsyncSync(dir);
  } finally {
    fs.closeSync(dir);
  }
}

async function fsyncDir(dir: string): Promise<void> {
  const handle = await fs.promises.open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
