/**
 * The client's options: the public option and result types, their defaults, and the checks that
 * run up front (a bad argument throws TypeError/RangeError before anything is sent).
 */
import type { ConnectionOptions } from 'node:tls';
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { checkNumber } from '#kernel';
import { ClientClosedError } from '../errors.js';
import { MAX_TOKEN, isAddress, isName, isTokenText } from '../protocol.js';
import { isValue, MAX_VALUE_BYTES } from '../election-wire.js';
import { MAX_PERMITS, type LockMode } from '../modes.js';

export interface BackoffOptions {
  /** First reconnect delay after a failure, ms. Default 50. Doubles per consecutive failure. */
  readonly initialMs?: number;
  /** Longest reconnect delay, ms. Default 5000. */
  readonly maxMs?: number;
}

export interface TicketClientOptions {
  /** Server host (one server). Default `127.0.0.1`. */
  readonly host?: string;
  /** Server port (one server). Required unless `addresses` is given. */
  readonly port?: number;
  /** A cluster's node addresses (`host:port`), tried in this order until the leader is found. Also
   * the allowlist: an `M`/`L` leader hint is kept only if it names one of these (or host:port). */
  readonly addresses?: readonly string[];
  /** Shared secret (the server's `--secret-file` content); sent as `H <secret>` first on every
   * connection. */
  readonly secret?: string | undefined;
  /** Connect with TLS, with these options of `tls.connect` (`ca`, `cert`, `key`, `servername`,
   * …) on every connection, redirects included. Without `servername`, an address's host name is
   * the name checked (an IP address is checked against the certificate's IP entries). */
  readonly tls?: ConnectionOptions | undefined;
  /** The server's lease length (`--lease`), ms; used to compute `expiresAt`. Default 30 000. */
  readonly leaseMs?: number;
  /** How long a request may wait for a connection before it fails with `ConnectError` (never
   * sent). Default 10 000 ms. */
  readonly connectTimeoutMs?: number;
  /** How long past its `waitMs` a sent request may go without a reply before the connection is
   * declared dead (the request then becomes Indeterminate). Default 10 000 ms. */
  readonly responseTimeoutMs?: number;
  /** Reconnect backoff. */
  readonly backoff?: BackoffOptions;
  /** Least delay before reconnecting after these server errors, ms (doubling while they repeat).
   * Defaults: no_leader 250, not_active 500, capacity 1000, auth_failed 2000. */
  readonly errorBackoffMs?: Partial<Record<'no_leader' | 'not_active' | 'auth_failed' | 'capacity', number>>;
  /** Opt-in: retry `B` (busy) with backoff inside the caller's own `waitMs` budget. Default off:
   * busy is returned at once. Can be set per call too. */
  readonly retryBusy?: boolean | BackoffOptions;
  /** Longest reply line accepted, terminator included. Default 2048: room for the longest `V`
   * line (a 256-byte key and owner, a 512-byte value, a token and a rev: about 1,070 bytes). */
  readonly maxLineBytes?: number;
  /** Prefix of the generated owners. Default `<hostname>-<pid>-<random>`. */
  readonly ownerPrefix?: string;
}

export interface AcquireOptions {
  /** How long the server may queue the request, ms. Default 0: do not wait (a held key answers
   * `timed-out` at once). */
  readonly waitMs?: number;
  /** The request's identifier (echoed back). Default: unique per request. */
  readonly owner?: string | undefined;
  readonly signal?: AbortSignal | undefined;
  /** Overrides the client's `retryBusy` for this call. */
  readonly retryBusy?: boolean | undefined;
  /** Ask for one of N permits (a semaphore of N, 1–65535): the grant has a `slot`. */
  readonly permits?: number | undefined;
  /** Ask for a shared hold (many shared holders at once, never beside an exclusive one). */
  readonly shared?: boolean | undefined;
}

export interface ReleaseOptions {
  readonly signal?: AbortSignal | undefined;
}

export type AcquireResult =
  | {
      readonly status: 'acquired';
      readonly key: string;
      readonly owner: string;
      /** Fencing token: pass it to the guarded resource, which rejects lower tokens. */
      readonly token: bigint;
      /** A permit's slot, 0…N−1 (the lowest free one when granted); absent for `x` and `s`. */
      readonly slot?: number;
      /** When the lease runs out, estimated on this host's clock (see docs: conservative for an
       * immediate grant; for a grant that waited, it assumes the grant's reply travelled no slower
       * than recent round trips). Renewals do not exist: release before it, or be fenced off. */
      readonly expiresAt: Date;
    }
  | { readonly status: 'timed-out'; readonly key: string; readonly owner: string }
  | { readonly status: 'busy'; readonly key: string; readonly owner: string };

/** A publish the server confirmed (`P`): the key's value is now `value`. */
export interface PublishResult {
  readonly key: string;
  readonly token: bigint;
  readonly value: string;
}

export interface ReleaseResult {
  /** `not-held`: the server had nothing registered under that key and token (never held, expired
   * and taken over, or already released). */
  readonly status: 'released' | 'not-held';
  readonly key: string;
  readonly token: bigint;
}

/** The client's default reply line limit: the longest `V` line fits (the server's requests stay at
 * its own limit). */
const CLIENT_MAX_LINE_BYTES = 2048;

/** Least delay before reconnecting after these server errors, ms (doubling while they repeat). */
const DEFAULT_ERROR_BACKOFF = { no_leader: 250, not_active: 500, capacity: 1_000, auth_failed: 2_000 } as const;

export interface Endpoint {
  readonly host: string;
  readonly port: number;
  /** `host:port` (`[v6]:port`), the form the allowlist and `M`/`L` use. */
  readonly text: string;
}

/** The options after defaults and checks: what the client and its lanes run on. */
export interface ResolvedClientOptions {
  /** The primary address first, then the other cluster addresses; also the `M`/`L` allowlist. */
  readonly endpoints: readonly Endpoint[];
  readonly secret: string | undefined;
  readonly tls: ConnectionOptions | undefined;
  readonly leaseMs: number;
  readonly maxLineBytes: number;
  readonly connectTimeoutMs: number;
  readonly responseTimeoutMs: number;
  readonly backoff: Required<BackoffOptions>;
  readonly errorBackoff: Readonly<Record<string, number>>;
  /** Busy-retry backoff, and whether calls retry by default. */
  readonly busyPolicy: Required<BackoffOptions>;
  readonly retryByDefault: boolean;
  /** Prefix of generated owners, ending in `-`. */
  readonly ownerPrefix: string;
}

export function resolveClientOptions(options: TicketClientOptions): ResolvedClientOptions {
  if (typeof options !== 'object' || options === null) throw new TypeError('options must be an object');
  const host = options.host ?? '127.0.0.1';
  if (typeof host !== 'string' || host.length === 0) throw new TypeError('host must be a non-empty string');
  const port = options.port;
  const addresses = options.addresses ?? [];
  if (!Array.isArray(addresses)) throw new TypeError('addresses must be an array of "host:port" strings');
  if (port === undefined && addresses.length === 0) throw new TypeError('give port (one server) or addresses');
  if (port !== undefined && typeof port !== 'number') throw new TypeError('port must be a number');
  if (port !== undefined && (!Number.isInteger(port) || port < 1 || port > 65535))
    throw new RangeError(`port must be an integer in 1..65535, got ${port}`);
  const endpoints = port === undefined ? [] : [endpoint(host, port)];
  const tlsOptions = options.tls;
  if (tlsOptions !== undefined && (typeof tlsOptions !== 'object' || tlsOptions === null))
    throw new TypeError('tls must be an object of tls.connect options');
  for (const field of ['host', 'port', 'path', 'socket'] as const) {
    if (tlsOptions?.[field] !== undefined)
      throw new TypeError(`tls.${field} is not allowed: addresses come from addresses`);
  }
  const secret = options.secret;
  if (secret !== undefined && (typeof secret !== 'string' || !isName(secret))) {
    throw new RangeError('secret must be 1-256 bytes of printable ASCII without spaces');
  }
  const leaseMs = checkNumber(options.leaseMs ?? 30_000, 'leaseMs');
  for (const address of addresses) {
    if (typeof address !== 'string' || !isAddress(address))
      throw new RangeError(`addresses: ${JSON.stringify(address)} is not host:port`);
    const parsed = parseEndpoint(address);
    if (!endpoints.some((e) => e.text === parsed.text)) endpoints.push(parsed);
  }
  const backoff = backoffOptions(options.backoff, 'backoff', { initialMs: 50, maxMs: 5_000 });
  const errorBackoff: Record<string, number> = { ...DEFAULT_ERROR_BACKOFF };
  if (options.errorBackoffMs !== undefined) {
    if (typeof options.errorBackoffMs !== 'object' || options.errorBackoffMs === null)
      throw new TypeError('errorBackoffMs must be an object');
    for (const [code, ms] of Object.entries(options.errorBackoffMs)) {
      if (!(code in DEFAULT_ERROR_BACKOFF)) throw new RangeError(`errorBackoffMs: unknown error code ${code}`);
      if (ms !== undefined) errorBackoff[code] = checkNumber(ms, `errorBackoffMs.${code}`, { zero: true });
    }
  }
  const retry = options.retryBusy;
  if (retry !== undefined && typeof retry !== 'boolean' && (typeof retry !== 'object' || retry === null)) {
    throw new TypeError('retryBusy must be a boolean or { initialMs, maxMs }');
  }
  const maxLineBytes = options.maxLineBytes ?? CLIENT_MAX_LINE_BYTES;
  if (!Number.isInteger(maxLineBytes) || maxLineBytes < 64)
    throw new RangeError('maxLineBytes must be an integer >= 64');
  const prefix =
    options.ownerPrefix ??
    `${hostname()
      .replace(/[^\x21-\x7e]/g, '_')
      .slice(0, 64)}-${process.pid}-${randomBytes(4).toString('hex')}`;
  if (typeof prefix !== 'string' || !isName(prefix) || prefix.length > 200)
    throw new RangeError('ownerPrefix must be 1-200 bytes of printable ASCII without spaces');
  return {
    endpoints,
    secret,
    tls: tlsOptions === undefined ? undefined : { ...tlsOptions },
    leaseMs,
    maxLineBytes,
    connectTimeoutMs: checkNumber(options.connectTimeoutMs ?? 10_000, 'connectTimeoutMs'),
    responseTimeoutMs: checkNumber(options.responseTimeoutMs ?? 10_000, 'responseTimeoutMs'),
    backoff,
    errorBackoff,
    busyPolicy: backoffOptions(typeof retry === 'object' ? retry : undefined, 'retryBusy', {
      initialMs: 10,
      maxMs: 1_000,
    }),
    retryByDefault: retry !== undefined && retry !== false,
    ownerPrefix: `${prefix}-`,
  };
}

/** `acquire`'s arguments, checked. `owner` undefined: generate one. */
export function checkAcquire(
  key: unknown,
  options: AcquireOptions,
  closed: boolean,
): {
  waitMs: number;
  signal: AbortSignal | undefined;
  owner: string | undefined;
  retryBusy: boolean | undefined;
  mode: LockMode;
} {
  checkKey(key);
  if (typeof options !== 'object' || options === null) throw new TypeError('options must be an object');
  const waitMs = options.waitMs ?? 0;
  const signal = options.signal;
  if (typeof waitMs !== 'number') throw new TypeError('options.waitMs must be a number');
  if (!Number.isSafeInteger(waitMs) || waitMs < 0)
    throw new RangeError(`options.waitMs must be an integer >= 0, got ${waitMs}`);
  if (signal !== undefined && !(signal instanceof AbortSignal))
    throw new TypeError('options.signal must be an AbortSignal');
  const owner = options.owner;
  if (owner !== undefined && typeof owner !== 'string') throw new TypeError('options.owner must be a string');
  if (owner !== undefined && !isName(owner))
    throw new RangeError('options.owner must be 1-256 bytes of printable ASCII without spaces');
  const retryBusy = options.retryBusy;
  if (retryBusy !== undefined && typeof retryBusy !== 'boolean')
    throw new TypeError('options.retryBusy must be a boolean');
  const mode = checkMode(options);
  if (closed) throw new ClientClosedError('the client is closed');
  signal?.throwIfAborted();
  return { waitMs, signal, owner, retryBusy, mode };
}

/** `release`'s arguments, checked: the token as canonical text. */
export function checkRelease(
  key: unknown,
  token: unknown,
  options: ReleaseOptions | undefined,
  closed: boolean,
): { tokenText: string; signal: AbortSignal | undefined } {
  checkKey(key);
  let tokenText: string;
  if (typeof token === 'bigint') {
    if (token < 1n || token > MAX_TOKEN) throw new RangeError('token must be in 1..2^64-1');
    tokenText = token.toString();
  } else if (typeof token === 'string') {
    if (!isTokenText(token)) throw new RangeError('token must be a canonical decimal in 1..2^64-1');
    tokenText = token;
  } else {
    throw new TypeError('token must be a bigint or a decimal string');
  }
  return { tokenText, signal: checkSignalOption(options, closed) };
}

/** `{ signal }` options, checked; throws when closed or already aborted. */
function checkSignalOption(options: ReleaseOptions | undefined, closed: boolean): AbortSignal | undefined {
  let signal: AbortSignal | undefined;
  if (options !== undefined) {
    if (typeof options !== 'object' || options === null) throw new TypeError('options must be an object');
    signal = options.signal;
    if (signal !== undefined && !(signal instanceof AbortSignal))
      throw new TypeError('options.signal must be an AbortSignal');
  }
  if (closed) throw new ClientClosedError('the client is closed');
  signal?.throwIfAborted();
  return signal;
}

/** `publish`'s arguments, checked: the token as canonical text. */
export function checkPublish(
  key: unknown,
  token: unknown,
  value: unknown,
  options: ReleaseOptions | undefined,
  closed: boolean,
): { tokenText: string; value: string; signal: AbortSignal | undefined } {
  checkKey(key);
  checkValue(value);
  return { ...checkRelease(key, token, options, closed), value };
}

/** A value to publish: 1-512 bytes of printable ASCII, spaces included. */
export function checkValue(value: unknown, what = 'value'): asserts value is string {
  if (typeof value !== 'string') throw new TypeError(`${what} must be a string`);
  if (!isValue(value)) throw new RangeError(`${what} must be 1-${MAX_VALUE_BYTES} bytes of printable ASCII`);
}

/** `observe`'s arguments, checked: its signal. */
export function checkObserve(key: unknown, options: ReleaseOptions, closed: boolean): AbortSignal | undefined {
  checkKey(key);
  return checkSignalOption(options, closed);
}

function checkKey(key: unknown): asserts key is string {
  if (typeof key !== 'string') throw new TypeError('key must be a string');
  if (!isName(key)) throw new RangeError('key must be 1-256 bytes of printable ASCII without spaces');
}

function endpoint(host: string, port: number): Endpoint {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  return { host: bare, port, text: bare.includes(':') ? `[${bare}]:${port}` : `${bare}:${port}` };
}

export function parseEndpoint(address: string): Endpoint {
  const colon = address.lastIndexOf(':');
  return endpoint(address.slice(0, colon), Number(address.slice(colon + 1)));
}

function backoffOptions(
  value: BackoffOptions | undefined,
  what: string,
  defaults: Required<BackoffOptions>,
): Required<BackoffOptions> {
  if (value === undefined) return defaults;
  if (typeof value !== 'object' || value === null) throw new TypeError(`${what} must be an object`);
  const initialMs = checkNumber(value.initialMs ?? defaults.initialMs, `${what}.initialMs`);
  const maxMs = checkNumber(value.maxMs ?? defaults.maxMs, `${what}.maxMs`);
  if (maxMs < initialMs) throw new RangeError(`${what}.maxMs must be >= ${what}.initialMs`);
  return { initialMs, maxMs };
}

/** The mode asked for by `permits` / `shared` (at most one of them). */
function checkMode(options: { readonly permits?: unknown; readonly shared?: unknown }): LockMode {
  const { permits, shared } = options;
  if (shared !== undefined && typeof shared !== 'boolean') throw new TypeError('options.shared must be a boolean');
  if (permits === undefined) return shared === true ? 's' : 'x';
  if (typeof permits !== 'number') throw new TypeError('options.permits must be a number');
  if (!Number.isInteger(permits) || permits < 1 || permits > MAX_PERMITS)
    throw new RangeError(`options.permits must be an integer in 1..${MAX_PERMITS}, got ${permits}`);
  if (shared === true) throw new TypeError('options.permits and options.shared exclude each other');
  return permits;
}
