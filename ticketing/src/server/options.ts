/**
 * The server's options: their types, defaults, and the checks that run once, in the constructor
 * (as undici checks its options up front), so that a bad option is a typed error before anything
 * listens.
 */
import { performance } from 'node:perf_hooks';
import { checkNumber, MAX_TIMER_MS } from '#kernel';
import { DEFAULT_MAX_LINE_BYTES, MIN_MAX_LINE_BYTES, isName } from '../protocol.js';
import { MAX_PERMITS } from '../modes.js';
import { DEFAULT_LIMITS } from '../state.js';
import type { ServerGate } from './cluster-host.js';
import { TlsMaterial } from './tls-material.js';

export interface TicketServerOptions {
  /** Address to listen on. Default `127.0.0.1`. */
  readonly host?: string;
  /** Port; 0 (the default) picks a free one. */
  readonly port?: number;
  /** Lease length of every grant, ms. Default 30 000. */
  readonly leaseMs?: number;
  /** Shared secret: when set, a connection's first line must be `H <secret>`. 1–256 bytes of
   * printable ASCII without spaces. */
  readonly secret?: string | undefined;
  /** Queued requests per key (beyond it: `B`). Default 10 000. */
  readonly maxWaitersPerKey?: number;
  /** Queued requests in total (beyond it: `B`). Default 100 000. */
  readonly maxWaiters?: number;
  /** Registered keys in total (beyond it: `B`). Default 1 000 000. */
  readonly maxKeys?: number;
  /** Shared holders of one key at once (an `s` request that finds this many: `B`). Default 10 000. */
  readonly maxSharedHolders?: number;
  /** The greatest N of a semaphore request (above it: `B`). Default and most 65 535. */
  readonly maxPermits?: number;
  /** Open connections (beyond it: `E capacity` and close). Default 10 000. */
  readonly maxConnections?: number;
  /** Longest request line in bytes, terminator included (beyond it: `E too_long`). Default 1024. */
  readonly maxLineBytes?: number;
  /** Token high-water mark file (see token-store.ts): tokens stay unique across restarts even if
   * the clock steps back. Optional. */
  readonly stateFile?: string | undefined;
  /** How often expired keys without waiters are swept, ms. Default 5000. */
  readonly sweepIntervalMs?: number;
  /** Replies buffered for one connection beyond which the server stops reading its requests until
   * it drains. Default 64 KiB (at least 16 KiB). */
  readonly outputHighWaterBytes?: number;
  /** A connection whose replies have not drained for this long is cut off; also how long a closing
   * connection may linger. Default 30 000 ms. */
  readonly writeTimeoutMs?: number;
  /** A connection with nothing pending is closed (FIN, no reply) after this long without a byte
   * from it. Nothing pending: no request queued, and no lease granted on it still running (a
   * holder that keeps its connection open while it works, to release on it, is never cut off;
   * its idle time counts from its lease's end). Default 30 000 ms. */
  readonly idleTimeoutMs?: number;
  /** A request line must be finished (`\n`) within this long of its first byte, or the connection
   * gets `E bad_request` and is closed. Default 10 000 ms. */
  readonly lineTimeoutMs?: number;
  /** With a secret: how long a connection may take to send its `H` line. Default 10 000 ms. */
  readonly authTimeoutMs?: number;
  /** `close()`: how long to wait for connections to finish before destroying them. Default 5000 ms. */
  readonly drainTimeoutMs?: number;
  /** Wall clock, epoch ms with sub-ms precision. Default: `performance.timeOrigin + performance.now()`
   * (wall-clock at start, monotonic after, so leases are not bent by clock steps). */
  readonly clock?: () => number;
  /** Keys observed (`O`) at once, all connections together (beyond it: `U <key> busy`).
   * Default 100 000. */
  readonly maxObservations?: number;
  /** Keys one connection may observe at once (beyond it: `U <key> busy`). Default 512. */
  readonly maxObservationsPerConnection?: number;
  /** Cluster mode (cluster/node.ts): decides whether this node serves, owns the state while it
   * leads, and holds every reply until the state change behind it is committed. */
  readonly gate?: ServerGate | undefined;
  /** Serve TLS (1.2 or later) with this material; with its CA, clients must present a certificate
   * it signed. `material.reload()` applies to connections opened from then on. */
  readonly tls?: TlsMaterial | undefined;
}

export const SERVER_DEFAULTS = {
  host: '127.0.0.1',
  port: 0,
  leaseMs: 30_000,
  maxConnections: 10_000,
  maxLineBytes: DEFAULT_MAX_LINE_BYTES,
  sweepIntervalMs: 5_000,
  outputHighWaterBytes: 64 * 1024,
  writeTimeoutMs: 30_000,
  idleTimeoutMs: 30_000,
  lineTimeoutMs: 10_000,
  authTimeoutMs: 10_000,
  drainTimeoutMs: 5_000,
  maxObservations: 100_000,
  maxObservationsPerConnection: 512,
  ...DEFAULT_LIMITS,
} as const;

export interface ServerAddress {
  readonly host: string;
  readonly port: number;
}

export interface ServerStats {
  readonly connections: number;
  readonly keys: number;
  readonly waiters: number;
  /** Observations open (`O`), all connections together. */
  readonly observations: number;
  readonly lastToken: bigint;
}

/** The options, checked and with their defaults filled in. */
export interface ServerConfig {
  readonly host: string;
  readonly port: number;
  readonly leaseMs: number;
  readonly maxConnections: number;
  readonly maxLineBytes: number;
  readonly limits: {
    readonly maxKeys: number;
    readonly maxWaiters: number;
    readonly maxWaitersPerKey: number;
    readonly maxSharedHolders: number;
    readonly maxPermits: number;
  };
  readonly observations: { readonly maxObservations: number; readonly maxObservationsPerConnection: number };
  readonly secret: string | undefined;
  readonly stateFile: string | undefined;
  readonly sweepIntervalMs: number;
  readonly highWater: number;
  readonly writeTimeoutMs: number;
  readonly authTimeoutMs: number;
  readonly idleTimeoutMs: number;
  readonly lineTimeoutMs: number;
  readonly drainTimeoutMs: number;
  readonly clock: () => number;
  readonly gate: ServerGate | undefined;
  readonly tls: TlsMaterial | undefined;
}

const MIN_OUTPUT_HIGH_WATER = 16 * 1024;

// timeOrigin is a getter that crosses into C++: read it once, not per request.
const TIME_ORIGIN = performance.timeOrigin;
const monotonicWallClock = (): number => TIME_ORIGIN + performance.now();

/** Checks every option (a TypeError or RangeError naming it) and fills in the defaults. */
export function resolveOptions(options: TicketServerOptions): ServerConfig {
  if (typeof options !== 'object' || options === null) throw new TypeError('options must be an object');
  const d = SERVER_DEFAULTS;
  const secret = checkSecret(options.secret);
  const stateFile = optionalString(options.stateFile, 'stateFile');
  if (options.clock !== undefined && typeof options.clock !== 'function')
    throw new TypeError('clock must be a function');
  const gate = options.gate;
  if (gate !== undefined && (typeof gate !== 'object' || gate === null || typeof gate.refusal !== 'function')) {
    throw new TypeError('gate must be a ServerGate');
  }
  if (gate !== undefined && stateFile !== undefined) throw new TypeError('stateFile and gate exclude each other');
  if (options.tls !== undefined && !(options.tls instanceof TlsMaterial))
    throw new TypeError('tls must be a TlsMaterial (TlsMaterial.load({ cert, key, ca }))');
  const count = (value: unknown, what: string, min: number): number =>
    integerIn(value, what, min, Number.MAX_SAFE_INTEGER);
  return {
    host: optionalString(options.host, 'host') ?? d.host,
    port: integerIn(options.port ?? d.port, 'port', 0, 65535),
    leaseMs: checkTimerMs(options.leaseMs ?? d.leaseMs, 'leaseMs'),
    maxConnections: integerIn(options.maxConnections ?? d.maxConnections, 'maxConnections', 1, 2 ** 31),
    maxLineBytes: integerIn(options.maxLineBytes ?? d.maxLineBytes, 'maxLineBytes', MIN_MAX_LINE_BYTES, 2 ** 24),
    limits: {
      maxKeys: count(options.maxKeys ?? d.maxKeys, 'maxKeys', 1),
      maxWaiters: count(options.maxWaiters ?? d.maxWaiters, 'maxWaiters', 0),
      maxWaitersPerKey: count(options.maxWaitersPerKey ?? d.maxWaitersPerKey, 'maxWaitersPerKey', 0),
      maxSharedHolders: count(options.maxSharedHolders ?? d.maxSharedHolders, 'maxSharedHolders', 1),
      maxPermits: integerIn(options.maxPermits ?? d.maxPermits, 'maxPermits', 0, MAX_PERMITS),
    },
    observations: {
      maxObservations: count(options.maxObservations ?? d.maxObservations, 'maxObservations', 0),
      maxObservationsPerConnection: count(
        options.maxObservationsPerConnection ?? d.maxObservationsPerConnection,
        'maxObservationsPerConnection',
        0,
      ),
    },
    secret,
    stateFile,
    sweepIntervalMs: checkTimerMs(options.sweepIntervalMs ?? d.sweepIntervalMs, 'sweepIntervalMs'),
    highWater: integerIn(
      options.outputHighWaterBytes ?? d.outputHighWaterBytes,
      'outputHighWaterBytes',
      MIN_OUTPUT_HIGH_WATER,
      2 ** 30,
    ),
    writeTimeoutMs: checkTimerMs(options.writeTimeoutMs ?? d.writeTimeoutMs, 'writeTimeoutMs'),
    authTimeoutMs: checkTimerMs(options.authTimeoutMs ?? d.authTimeoutMs, 'authTimeoutMs'),
    idleTimeoutMs: checkTimerMs(options.idleTimeoutMs ?? d.idleTimeoutMs, 'idleTimeoutMs'),
    lineTimeoutMs: checkTimerMs(options.lineTimeoutMs ?? d.lineTimeoutMs, 'lineTimeoutMs'),
    drainTimeoutMs: checkTimerMs(options.drainTimeoutMs ?? d.drainTimeoutMs, 'drainTimeoutMs'),
    clock: options.clock ?? monotonicWallClock,
    gate,
    tls: options.tls,
  };
}

/** The `H` secret's rule: 1–256 bytes of printable ASCII without spaces. */
export function checkSecret(value: unknown): string | undefined {
  const secret = optionalString(value, 'secret');
  if (secret !== undefined && !isName(secret)) {
    throw new RangeError('secret must be 1-256 bytes of printable ASCII without spaces');
  }
  return secret;
}

function optionalString(value: unknown, what: string): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string') throw new TypeError(`${what} must be a string`);
  if (value.length === 0) throw new RangeError(`${what} must not be empty`);
  return value;
}

function integerIn(value: unknown, what: string, min: number, max: number): number {
  if (typeof value !== 'number') throw new TypeError(`${what} must be a number`);
  if (!Number.isSafeInteger(value) || value < min || value > max)
    throw new RangeError(`${what} must be an integer in ${min}..${max}, got ${value}`);
  return value;
}

/** A delay a timer can hold: the kernel's positive-number rule, at most 2^31-1 ms. */
const checkTimerMs = (value: unknown, what: string): number => checkNumber(value, what, { max: MAX_TIMER_MS });
