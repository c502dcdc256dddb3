/** The parsers and file readers behind the `ticketing` commands' own flags (those both CLIs share
 * are in src/kernel/flags.ts): a bad value is a usage error (exit 64) that says what was expected;
 * an unreadable file names the flag's file. */
import { readFileSync } from 'node:fs';
import { InvalidArgumentError } from 'commander';
import { timerDuration } from '#kernel/flags';
import { checkLeaderTtlMs, checkPrefix } from '../cluster/options.js';
import { parseListenAddress } from '../observe/http.js';
import { isValue, MAX_VALUE_BYTES } from '../election-wire.js';
import { isAddress, isName } from '../protocol.js';

export function integer(min: number, max: number) {
  return (text: string): number => {
    if (!/^\d+$/.test(text) || Number(text) < min || Number(text) > max) {
      throw new InvalidArgumentError(`expected an integer in ${min}..${max}`);
    }
    return Number(text);
  };
}

export function addressList(text: string): string[] {
  const list = text.split(',');
  for (const address of list)
    if (!isAddress(address)) throw new InvalidArgumentError(`expected host:port, got ${JSON.stringify(address)}`);
  return list;
}

export function keyName(text: string): string {
  if (!isName(text)) throw new InvalidArgumentError('expected 1-256 bytes of printable ASCII without spaces');
  return text;
}

/** A value to publish (`run --publish`). */
export function publishedValue(text: string): string {
  if (!isValue(text)) throw new InvalidArgumentError(`expected 1-${MAX_VALUE_BYTES} bytes of printable ASCII`);
  return text;
}

/** A file named by a flag (`what` says which, in the error), read whole. */
export function readNamedFile(path: string, what: string, encoding: BufferEncoding): string {
  try {
    return readFileSync(path, encoding);
  } catch (error) {
    // Node's EISDIR (and some other) messages omit the path.
    const code = (error as NodeJS.ErrnoException).code;
    const why = code === 'EISDIR' ? 'is a directory (EISDIR)' : (error as Error).message.replace(/, open '.*'$/, '');
    throw new Error(`${what} ${path}: ${why}`, { cause: error });
  }
}

/** The secret is the file's content, without one trailing newline. */
export function readSecretFile(path: string): string {
  const secret = readNamedFile(path, 'secret file', 'latin1').replace(/\r?\n$/, '');
  if (!isName(secret))
    throw new Error(`secret file ${path}: the secret must be 1-256 bytes of printable ASCII without spaces`);
  return secret;
}

/** `http://host:port` or `https://host:port`, comma-separated, all of one scheme. */
export function etcdUrls(text: string): string[] {
  const urls = text.split(',');
  for (const url of urls) {
    if (
      !/^https?:\/\/(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):\d{1,5}\/?$/.test(url) ||
      Number(url.replace(/\/$/, '').split(':').pop()) > 65535
    ) {
      throw new InvalidArgumentError(
        `expected http://host:port or https://host:port URLs separated by commas, got ${JSON.stringify(url)}`,
      );
    }
  }
  if (new Set(urls.map((url) => url.startsWith('https:'))).size > 1)
    throw new InvalidArgumentError('expected all http:// or all https:// URLs, not a mix');
  return urls;
}

export function etcdUserName(text: string): string {
  if (!/^[\x21-\x7e]{1,128}$/.test(text))
    throw new InvalidArgumentError('expected 1-128 printable ASCII characters without spaces');
  return text;
}

export function listenAddress(text: string): { host: string; port: number } {
  try {
    return parseListenAddress(text);
  } catch (error) {
    throw new InvalidArgumentError((error as Error).message);
  }
}

export function advertiseAddress(text: string): string {
  if (!isAddress(text)) throw new InvalidArgumentError('expected host:port');
  return text;
}

/** A library's check of an option as a flag's parser: the error it throws is a usage error. */
function checked<T>(check: () => T): T {
  try {
    return check();
  } catch (error) {
    throw new InvalidArgumentError((error as Error).message);
  }
}

export function etcdPrefix(text: string): string {
  return checked(() => checkPrefix(text, 'the prefix'));
}

export function leaderTtl(text: string): number {
  const ms = timerDuration(text);
  return checked(() => checkLeaderTtlMs(ms, 'the leader TTL'));
}
