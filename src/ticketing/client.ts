/**
 * The pipelining client. Many requests share one connection and their replies come back in any
 * order, so every reply is matched by (op, key, identifier) — acquire-side replies (`A`/`T`/`B`)
 * by the request's owner, release-side replies (`R`/`N`) by the token — never by position.
 * Releases travel on a separate, reserved connection (the release lane), so a release never
 * waits behind acquires and an orphaned grant can always be handed back.
 *
 * What the client promises about outcomes (docs/ticketing.md "Client"):
 * - a resolved result is definitive (acquired / timed out / busy; released / not held);
 * - `IndeterminateError` means bytes of the request were sent and no definitive reply came: the
 *   request may have taken effect. An acquire is never re-sent with the same owner to find out;
 * - any other rejection means the request never left this process.
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import {
  AuthFailedError,
  CapacityError,
  ClientClosedError,
  ConnectError,
  DuplicateRequestError,
  IndeterminateError,
  ProtocolError,
  ServerError,
  type IndeterminateReason,
} from './errors.js';
import { channels, publish } from './events.js';
import { Table } from './table.js';
import {
  DEFAULT_MAX_LINE_BYTES,
  LineFramer,
  MAX_TOKEN,
  formatAcquire,
  formatHello,
  formatRelease,
  isAddress,
  isName,
  isTokenText,
  parseReply,
} from './protocol.js';

export interface BackoffOptions {
  /** First reconnect delay after a failure, ms. Default 50. Doubles per consecutive failure. */
  readonly initialMs?: number;
  /** Longest reconnect delay, ms. Default 5000. */
  readonly maxMs?: number;
}

export interface TicketClientOptions {
  /** Server host. Default `127.0.0.1`. */
  readonly host?: string;
  /** Server port. Required. */
  readonly port: number;
  /** Shared secret (the server's `--secret-file` content); sent as `H <secret>` first on every
   * connection. */
  readonly secret?: string | undefined;
  /** The server's lease length (`--lease`), ms; used to compute `expiresAt`. Default 30 000. */
  readonly leaseMs?: number;
  /** Allowlist of cluster node addresses (`host:port`). An `M`/`L` leader hint is kept only if it
   * names one of these or the primary address. */
  readonly clusterAddresses?: readonly string[];
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
  /** Longest reply line accepted, terminator included. Default 1024. */
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
      /** When the lease runs out, estimated on this host's clock (see docs: conservative for an
       * immediate grant; for a grant that waited, it assumes the grant's reply travelled no slower
       * than recent round trips). Renewals do not exist: release before it, or be fenced off. */
      readonly expiresAt: Date;
    }
  | { readonly status: 'timed-out'; readonly key: string; readonly owner: string }
  | { readonly status: 'busy'; readonly key: string; readonly owner: string };

export interface ReleaseResult {
  /** `not-held`: the server had nothing registered under that key and token (never held, expired
   * and taken over, or already released). */
  readonly status: 'released' | 'not-held';
  readonly key: string;
  readonly token: bigint;
}

/**
 * The client's clock: performance.now(), read at most once per turn of the event loop (and once
 * per received chunk). Request bookkeeping — connect timeouts, wait budgets, round trips — needs
 * milliseconds, not microseconds, and a clock read per request costs about 8 % of throughput.
 */
let turnNow: number | undefined;
const endTurn = (): void => {
  turnNow = undefined;
};
function now(): number {
  if (turnNow === undefined) {
    turnNow = performance.now();
    process.nextTick(endTurn);
  }
  return turnNow;
}
/** A fresh reading, shared by the rest of this turn. */
function freshNow(): number {
  if (turnNow === undefined) process.nextTick(endTurn);
  turnNow = performance.now();
  return turnNow;
}

const DEFAULT_ERROR_BACKOFF = { no_leader: 250, not_active: 500, capacity: 1_000, auth_failed: 2_000 } as const;
const BACKOFF_ERRORS = new Set<string>(['no_leader', 'not_active', 'auth_failed']);
/** The E codes that refuse a connection before any request of it is processed. */
const REFUSALS = new Map<string, typeof AuthFailedError | typeof CapacityError>([
  ['auth_failed', AuthFailedError],
  ['capacity', CapacityError],
]);
const RTT_SAMPLES = 8;

interface PendingBase {
  readonly key: string;
  readonly signal: AbortSignal | undefined;
  /** performance.now() when queued (for connectTimeoutMs). */
  submittedAt: number;
  /** performance.now() when its bytes were handed to the socket; -1 while unsent. */
  sentAt: number;
  settled: boolean;
  lane: Lane | undefined;
  onAbort: (() => void) | undefined;
}

interface PendingAcquire extends PendingBase {
  readonly kind: 'acquire';
  readonly owner: string;
  /** The next pending acquire with the same owner (another key): the client's table is keyed by
   * owner, the identifier every acquire-side reply echoes. */
  ownerNext: PendingAcquire | undefined;
  /** The caller's budget: server wait of this attempt, and the deadline over all busy retries. */
  waitMs: number;
  readonly deadline: number;
  readonly retryBusy: Required<BackoffOptions> | undefined;
  attempt: number;
  retryTimer: NodeJS.Timeout | undefined;
  line: string;
  readonly resolve: (result: AcquireResult) => void;
  readonly reject: (error: unknown) => void;
}

interface PendingRelease extends PendingBase {
  readonly kind: 'release';
  readonly token: bigint;
  readonly tokenText: string;
  readonly line: string;
  readonly waitMs: 0;
  /** The next pending release with the same token (the client's table is keyed by token). */
  tokenNext: PendingRelease | undefined;
  /** Waiting for an earlier release of the same (key, token) to settle before it is sent. */
  blocked: boolean;
  readonly resolve: (result: ReleaseResult) => void;
  readonly reject: (error: unknown) => void;
}

type Pending = PendingAcquire | PendingRelease;

interface Endpoint {
  readonly host: string;
  readonly port: number;
  readonly text: string;
}

/** Client-wide settings and services the lanes share. */
interface ClientCore {
  readonly client: TicketClient;
  readonly secret: string | undefined;
  readonly maxLineBytes: number;
  readonly connectTimeoutMs: number;
  readonly responseTimeoutMs: number;
  readonly backoff: Required<BackoffOptions>;
  readonly errorBackoff: Record<string, number>;
  readonly leaseMs: number;
  pickEndpoint(failures: number): Endpoint;
  setLeaderHint(address: string | undefined, via: string): void;
  orphanRelease(key: string, token: string): void;
  /** A pending acquire of this client by (owner, key), if any. */
  findAcquire(owner: string, key: string): PendingAcquire | undefined;
  /** A pending release of this client by (token, key) that was sent, if any. */
  findRelease(token: string, key: string): PendingRelease | undefined;
  /** Every request of this client sent on `lane` and not yet settled. */
  sentOn(lane: Lane): Pending[];
  finishAcquire(p: PendingAcquire): void;
  finishRelease(p: PendingRelease): void;
  retryBusy(p: PendingAcquire): boolean;
}

/**
 * One connection and its requests: queued (unsent) ones, and sent ones indexed for matching.
 * Reconnects with backoff while it has work; a connection that fails takes its sent requests
 * with it (Indeterminate), never its unsent ones.
 */
class Lane {
  #socket: net.Socket | undefined;
  #state: 'idle' | 'connecting' | 'open' | 'backoff' = 'idle';
  #framer: LineFramer;
  #queue: Pending[] = [];
  /** Requests sent on the current connection and not settled. */
  #inFlight = 0;
  #flushScheduled = false;
  #failures = 0;
  /** The current socket's error, and the cause of the last teardown (for ConnectError). */
  #lastError: unknown;
  #lastFailure: unknown;
  #helloSent = false;
  /** A reply to a request (A/T/B/R/N) arrived on the current connection. */
  #answered = false;
  #idleWaiters: Array<() => void> = [];
  #retryTimer: NodeJS.Timeout | undefined;
  #connectTimer: NodeJS.Timeout | undefined;
  #watchdog: NodeJS.Timeout | undefined;
  #endpoint: Endpoint | undefined;
  readonly #rtt: number[] = [];
  #rttNext = 0;
  #closed = false;

  constructor(
    readonly core: ClientCore,
    readonly role: 'acquire' | 'release',
  ) {
    this.#framer = new LineFramer(core.maxLineBytes);
  }

  get inFlight(): number {
    return this.#inFlight;
  }
  get queued(): number {
    return this.#queue.length;
  }

  /** The largest of the recent round trips of requests that could not have waited, or undefined. */
  get recentRtt(): number | undefined {
    return this.#rtt.length === 0 ? undefined : Math.max(...this.#rtt);
  }

  submit(p: Pending): void {
    if (this.#closed) {
      this.#settleReject(p, new ClientClosedError('the client is closed'));
      return;
    }
    p.lane = this;
    p.sentAt = -1;
    this.#queue.push(p);
    if (this.#state === 'idle') this.#connect();
    else if (this.#state === 'backoff') this.#retryTimer?.ref(); // there is work to wait for now
    else if (this.#state === 'open' && !this.#flushScheduled) {
      // Coalesce every request made in this turn (and in the promise continuations it runs)
      // into one write: nextTick runs after the microtask queue drains.
      this.#flushScheduled = true;
      process.nextTick(this.#flush);
    }
    this.#startWatchdog();
  }

  /** Caller's abort. Unsent: withdrawn, rejected with the signal's reason. Sent: the outcome is
   * unknowable now, and dropping only this request could orphan a grant already on its way, so
   * the connection is closed (every request sent on it becomes Indeterminate). */
  abort(p: Pending, reason: unknown): void {
    if (p.settled) return;
    if (p.sentAt < 0) {
      const index = this.#queue.indexOf(p);
      if (index >= 0) this.#queue.splice(index, 1);
      this.#settleReject(p, reason);
      return;
    }
    this.#teardown('connection-lost', new Error('the connection was closed because another request sent on it was aborted'), undefined, {
      p,
      reason,
    });
  }

  /** Rejects what is unsent, waits for nothing: used by close()/destroy(). */
  closeQueued(error: Error): void {
    this.#closed = true;
    const queue = this.#queue;
    this.#queue = [];
    for (const p of queue) this.#settleReject(p, error);
  }

  /** Ends the connection: sent requests become Indeterminate. */
  destroy(reason: IndeterminateReason): void {
    this.#closed = true;
    this.#teardown(reason, new ClientClosedError('the client was destroyed'));
    clearTimeout(this.#retryTimer);
    this.#state = 'idle';
    this.#stopWatchdog();
  }

  /** Resolves once nothing is queued or in flight. */
  whenIdle(): Promise<void> {
    if (this.#queue.length === 0 && this.inFlight === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  /** Ends the connection gracefully (FIN); nothing may be in flight. */
  end(): void {
    this.#closed = true;
    clearTimeout(this.#retryTimer);
    clearTimeout(this.#connectTimer);
    this.#stopWatchdog();
    const socket = this.#socket;
    this.#socket = undefined;
    this.#state = 'idle';
    socket?.end();
  }

  // -------------------------------------------------------------------------------------------
  // Connection

  #connect(): void {
    const endpoint = this.core.pickEndpoint(this.#failures);
    this.#endpoint = endpoint;
    this.#state = 'connecting';
    this.#helloSent = false;
    this.#answered = false;
    this.#framer = new LineFramer(this.core.maxLineBytes);
    const socket = net.connect({ host: endpoint.host, port: endpoint.port, noDelay: true, keepAlive: true, keepAliveInitialDelay: 30_000 });
    this.#socket = socket;
    this.#connectTimer = setTimeout(() => {
      if (this.#socket === socket) this.#teardown('connection-lost', new Error(`connect to ${endpoint.text} timed out`));
    }, Math.min(this.core.connectTimeoutMs, 5_000)).unref();
    socket.on('connect', () => {
      if (this.#socket !== socket) return;
      clearTimeout(this.#connectTimer);
      this.#state = 'open';
      publish(channels.clientConnect, () => ({ client: this.core.client, lane: this.role, address: endpoint.text }));
      this.#flush();
    });
    socket.on('data', (chunk: Buffer) => {
      if (this.#socket !== socket) return;
      freshNow(); // when these replies arrived, for everything matched below
      const framer = this.#framer;
      const status = framer.push(chunk, this.#onLine);
      if (status === 'too_long' && this.#socket === socket && this.#framer === framer) {
        this.#teardown('connection-lost', new ProtocolError(`reply line exceeds ${this.core.maxLineBytes} bytes`));
      }
    });
    socket.on('error', (error) => {
      if (this.#socket === socket) this.#lastError = error;
    });
    socket.on('close', () => {
      if (this.#socket !== socket) return;
      if (this.#state === 'open' && this.#inFlight === 0 && this.#lastError === undefined && this.#framer.bufferedBytes === 0) {
        this.#closedWhileIdle();
        return;
      }
      this.#teardown('connection-lost', this.#lastError ?? new Error('connection closed by the server'));
    });
  }

  readonly #flush = (): void => {
    this.#flushScheduled = false;
    const socket = this.#socket;
    if (this.#state !== 'open' || socket === undefined) return;
    let out = '';
    if (this.core.secret !== undefined && !this.#helloSent) {
      out = formatHello(this.core.secret);
      this.#helloSent = true;
    }
    const sentAt = freshNow();
    const queue = this.#queue;
    this.#queue = [];
    for (const p of queue) {
      if (p.settled) continue;
      // Registered (in the client's tables since the call; now as sent on this connection) before
      // the bytes go out: a reply can beat the write callback.
      p.sentAt = sentAt;
      this.#inFlight++;
      out += p.line;
    }
    if (out.length > 0) socket.write(out, 'latin1');
  };

  /**
   * One reply line. Returns false once the connection was torn down (stop reading).
   * Fast path: a reply whose (key, identifier) equals a pending request's is well-formed in those
   * fields by construction (ours were validated), so only its shape and token are checked here;
   * everything else takes the full parse, which tells malformed from unmatched.
   */
  readonly #onLine = (line: string): boolean => {
    if (line.charCodeAt(1) === 32) {
      const op = line.charCodeAt(0);
      const a = line.indexOf(' ', 2);
      if (a > 2) {
        if (op === 65 /* A */) {
          const b = line.indexOf(' ', a + 1);
          if (b > a + 1 && line.indexOf(' ', b + 1) === -1) {
            const p = this.#sentAcquire(line.slice(a + 1, b), line.slice(b + 1));
            const token = line.slice(2, a);
            if (p !== undefined && isTokenText(token)) {
              this.#granted(p, token);
              return true;
            }
          }
        } else if (line.indexOf(' ', a + 1) === -1) {
          if (op === 84 /* T */ || op === 66 /* B */) {
            const p = this.#sentAcquire(line.slice(2, a), line.slice(a + 1));
            if (p !== undefined) {
              this.#refused(p, op === 66);
              return true;
            }
          } else if (op === 82 /* R */ || op === 78 /* N */) {
            const p = this.#sentRelease(line.slice(2, a), line.slice(a + 1));
            if (p !== undefined) {
              this.#released(p, op === 82);
              return true;
            }
          }
        }
      }
    }
    return this.#onOtherLine(line);
  };

  #sentAcquire(owner: string, key: string): PendingAcquire | undefined {
    const p = this.core.findAcquire(owner, key);
    return p !== undefined && p.lane === this && p.sentAt >= 0 ? p : undefined;
  }

  #sentRelease(token: string, key: string): PendingRelease | undefined {
    const p = this.core.findRelease(token, key);
    return p !== undefined && p.lane === this && p.sentAt >= 0 ? p : undefined;
  }

  #granted(p: PendingAcquire, token: string): void {
    const receivedAt = now();
    if (p.waitMs === 0) this.#sample(receivedAt - p.sentAt);
    this.#failures = 0;
    this.#answered = true;
    // Earliest instant the server can have granted it: not before the request was sent, and (for
    // a grant that waited) not before a recent round trip ago.
    const rtt = p.waitMs === 0 ? undefined : this.recentRtt;
    const grantedNotBefore = rtt === undefined ? p.sentAt : Math.max(p.sentAt, receivedAt - rtt);
    const expiresAt = new Date(Date.now() + (grantedNotBefore + this.core.leaseMs - receivedAt));
    this.#settle(p);
    p.resolve({ status: 'acquired', key: p.key, owner: p.owner, token: BigInt(token), expiresAt });
  }

  #refused(p: PendingAcquire, busy: boolean): void {
    if (p.waitMs === 0 || busy) this.#sample(now() - p.sentAt);
    this.#failures = 0;
    this.#answered = true;
    if (busy && this.core.retryBusy(p)) {
      // Not settled: it goes back to the queue after a backoff, with what is left of its wait
      // budget (same owner: B is definitive, nothing is pending under it).
      this.#detach(p);
      return;
    }
    this.#settle(p);
    p.resolve({ status: busy ? 'busy' : 'timed-out', key: p.key, owner: p.owner });
  }

  #released(p: PendingRelease, released: boolean): void {
    this.#sample(now() - p.sentAt);
    this.#failures = 0;
    this.#answered = true;
    this.#settle(p);
    p.resolve({ status: released ? 'released' : 'not-held', key: p.key, token: p.token });
  }

  /** Replies off the fast path: malformed, unmatched, M, L, E — or matched ones in odd shapes. */
  #onOtherLine(line: string): boolean {
    const reply = parseReply(line);
    if (reply === undefined) {
      this.#teardown('connection-lost', new ProtocolError('malformed or unknown reply', line));
      return false;
    }
    switch (reply.op) {
      case 'A': {
        const p = this.#sentAcquire(reply.owner, reply.key);
        if (p === undefined) {
          // A grant nobody waits for: hand it back by its exact token, then close (the session
          // is out of step with the server).
          this.core.orphanRelease(reply.key, reply.token);
          this.#teardown('connection-lost', new ProtocolError('a grant matches no pending acquire', line));
          return false;
        }
        this.#granted(p, reply.token);
        return true;
      }
      case 'T':
      case 'B': {
        const p = this.#sentAcquire(reply.owner, reply.key);
        if (p === undefined) {
          this.#teardown('connection-lost', new ProtocolError('a reply matches no pending acquire', line));
          return false;
        }
        this.#refused(p, reply.op === 'B');
        return true;
      }
      case 'R':
      case 'N': {
        const p = this.#sentRelease(reply.token, reply.key);
        if (p === undefined) {
          this.#teardown('connection-lost', new ProtocolError('a reply matches no pending release', line));
          return false;
        }
        this.#released(p, reply.op === 'R');
        return true;
      }
      case 'L':
        this.core.setLeaderHint(reply.address, 'L');
        return true;
      case 'M':
        this.core.setLeaderHint(reply.address, 'M');
        this.#teardown('connection-lost', new ServerError('moved', `the leader is ${reply.address}`));
        return false;
      case 'E': {
        const error = new ServerError(reply.code, reply.detail);
        if (reply.code === 'no_leader') this.core.setLeaderHint(undefined, 'no_leader');
        const floor = BACKOFF_ERRORS.has(reply.code) || reply.code === 'capacity' ? this.core.errorBackoff[reply.code] : undefined;
        // Definite refusals. The server sends `E capacity` on accept, before reading a byte, and
        // `E auth_failed` instead of processing anything after a bad or missing `H`; it discards
        // whatever follows until it closes. So while no request on this connection has been
        // answered, every request sent on it, even one written (pipelined) before the E arrived,
        // was never processed: it is refused, not Indeterminate. After an answer these codes
        // would break the protocol, and the usual rule (Indeterminate) applies.
        const refused = this.#answered ? undefined : REFUSALS.get(reply.code);
        this.#teardown('connection-lost', error, floor, undefined, refused);
        return false;
      }
    }
  }

  /**
   * Closes the connection. Every sent request without a reply becomes Indeterminate (an aborted
   * one with reason `aborted` and the signal's reason as cause); unsent requests stay queued for
   * the next connection, which is attempted after a backoff if there is work.
   */
  #teardown(
    reason: IndeterminateReason,
    cause: unknown,
    floorMs?: number,
    aborted?: { p: Pending; reason: unknown },
    refused?: typeof AuthFailedError | typeof CapacityError,
  ): void {
    const socket = this.#socket;
    if (socket === undefined) return;
    this.#socket = undefined;
    clearTimeout(this.#connectTimer);
    const partial = this.#framer.partialLine();
    this.#framer = new LineFramer(this.core.maxLineBytes);
    socket.destroy();
    this.#lastError = undefined;
    this.#lastFailure = cause;
    const sent = this.core.sentOn(this);
    const salvaged = partial === undefined ? undefined : this.#salvage(partial, sent);
    if (refused !== undefined) {
      for (const p of sent) {
        const what = p.kind === 'acquire' ? `acquire ${p.key} (owner ${p.owner})` : `release ${p.key} token ${p.token}`;
        const error =
          p.kind === 'acquire'
            ? new refused(`${what} was refused (${describe(cause)}): it did not take effect`, 'acquire', p.key, p.owner, undefined, { cause })
            : new refused(`${what} was refused (${describe(cause)}): it did not take effect`, 'release', p.key, undefined, p.token, { cause });
        this.#settleReject(p, error);
      }
    }
    for (const p of sent) {
      if (p.kind !== 'acquire') continue;
      const token = salvaged?.p === p ? salvaged.token : undefined;
      const error =
        aborted?.p === p
          ? new IndeterminateError(
              `acquire ${p.key} (owner ${p.owner}) was aborted after it was sent: it may or may not hold the key`,
              'acquire',
              p.key,
              p.owner,
              token,
              'aborted',
              { cause: aborted.reason },
            )
          : new IndeterminateError(
              `acquire ${p.key} (owner ${p.owner}): no definitive reply (${describe(cause)}); it may or may not hold the key`,
              'acquire',
              p.key,
              p.owner,
              token,
              reason,
              { cause },
            );
      this.#settleReject(p, error, true);
    }
    for (const p of sent) {
      if (p.kind !== 'release') continue;
      const error =
        aborted?.p === p
          ? new IndeterminateError(`release ${p.key} token ${p.token} was aborted after it was sent`, 'release', p.key, undefined, p.token, 'aborted', {
              cause: aborted.reason,
            })
          : new IndeterminateError(
              `release ${p.key} token ${p.token}: no definitive reply (${describe(cause)}); it may or may not have released`,
              'release',
              p.key,
              undefined,
              p.token,
              reason,
              { cause },
            );
      this.#settleReject(p, error, true);
    }
    // A close the caller asked for (an abort) says nothing about the server: no backoff for it.
    if (aborted === undefined) this.#failures++;
    clearTimeout(this.#retryTimer);
    if (this.#closed) {
      this.#state = 'idle';
    } else {
      const delay = aborted === undefined ? this.#backoffDelay(floorMs) : 0;
      this.#state = 'backoff';
      this.#retryTimer = setTimeout(() => {
        this.#state = 'idle';
        if (this.#queue.length > 0 && !this.#closed) this.#connect();
      }, delay);
      if (this.#queue.length === 0) this.#retryTimer.unref();
      publish(channels.clientClose, () => ({ client: this.core.client, lane: this.role, address: this.#endpoint?.text, reason, error: cause, backoffMs: delay }));
    }
    if (salvaged !== undefined) this.core.orphanRelease(salvaged.p.key, salvaged.tokenText);
    this.#maybeStopWatchdog();
  }

  /**
   * The server ended a connection that had nothing of ours in flight: what its idle timeout does.
   * Nothing was lost and nothing says the server is unwell, so this is no failure: no backoff,
   * and the next request (or one queued this turn) connects at once.
   */
  #closedWhileIdle(): void {
    this.#socket = undefined;
    this.#state = 'idle';
    clearTimeout(this.#connectTimer);
    publish(channels.clientClose, () => ({ client: this.core.client, lane: this.role, address: this.#endpoint?.text, reason: 'idle', error: undefined, backoffMs: 0 }));
    if (this.#queue.length > 0 && !this.#closed) this.#connect();
  }

  /** A reply cut off mid-line may still carry a grant's token (`A <token> <owner> <key…`):
   * if it names a pending acquire, the token is known and can be handed back. */
  #salvage(partial: string, sent: Pending[]): { p: PendingAcquire; token: bigint; tokenText: string } | undefined {
    const m = /^A ([1-9][0-9]{0,19}) ([\x21-\x7e]{1,256}) ([\x21-\x7e]*)$/.exec(partial);
    if (m === null || !isTokenText(m[1]!)) return undefined;
    const [, tokenText, owner, keyStart] = m as unknown as [string, string, string, string];
    for (const p of sent) {
      if (p.kind === 'acquire' && p.owner === owner && p.key.startsWith(keyStart)) return { p, token: BigInt(tokenText), tokenText };
    }
    return undefined;
  }

  #backoffDelay(floorMs: number | undefined): number {
    const { initialMs, maxMs } = this.core.backoff;
    const exponent = Math.min(this.#failures - 1, 30);
    const base = Math.min(maxMs, initialMs * 2 ** exponent);
    const jittered = base * (0.5 + Math.random() * 0.5);
    const floor = floorMs === undefined ? 0 : Math.min(Math.max(maxMs, floorMs), floorMs * 2 ** Math.min(exponent, 6));
    return Math.max(jittered, floor);
  }

  /** A matched reply: the connection works (the backoff starts over next time). */
  #proven(): void {
    this.#failures = 0;
  }

  #sample(rtt: number): void {
    this.#rtt[this.#rttNext] = rtt;
    this.#rttNext = (this.#rttNext + 1) % RTT_SAMPLES;
  }

  #settle(p: Pending): void {
    if (p.sentAt >= 0 && p.lane === this) this.#inFlight--;
    p.settled = true;
    if (p.onAbort !== undefined) p.signal!.removeEventListener('abort', p.onAbort);
    if (p.kind === 'acquire') {
      clearTimeout(p.retryTimer);
      this.core.finishAcquire(p);
    } else {
      this.core.finishRelease(p);
    }
    this.#maybeStopWatchdog();
  }

  /** Takes a request off this lane without settling it (a busy retry re-submits it later). */
  #detach(p: PendingAcquire): void {
    this.#inFlight--;
    p.lane = undefined;
    p.sentAt = -1;
    this.#maybeStopWatchdog();
  }

  #settleReject(p: Pending, error: unknown, indeterminate = false): void {
    if (p.settled) return;
    this.#settle(p);
    if (indeterminate) publish(channels.clientIndeterminate, () => ({ client: this.core.client, error }));
    p.reject(error);
  }

  // -------------------------------------------------------------------------------------------
  // Timeouts: a request waits for a connection at most connectTimeoutMs (then it was never sent:
  // ConnectError); a sent one gets its waitMs plus responseTimeoutMs before the connection is
  // declared dead (then it is Indeterminate).

  #startWatchdog(): void {
    if (this.#watchdog !== undefined) return;
    const tick = Math.max(5, Math.min(1_000, Math.min(this.core.connectTimeoutMs, this.core.responseTimeoutMs) / 4));
    this.#watchdog = setInterval(this.#check, tick).unref();
  }

  #maybeStopWatchdog(): void {
    if (this.#queue.length === 0 && this.inFlight === 0) {
      this.#stopWatchdog();
      const waiters = this.#idleWaiters;
      if (waiters.length > 0) {
        this.#idleWaiters = [];
        for (const resolve of waiters) resolve();
      }
    }
  }

  #stopWatchdog(): void {
    clearInterval(this.#watchdog);
    this.#watchdog = undefined;
  }

  readonly #check = (): void => {
    const now = performance.now();
    if (this.#queue.length > 0 && this.#state !== 'open') {
      const expired = this.#queue.filter((p) => now - p.submittedAt > this.core.connectTimeoutMs);
      if (expired.length > 0) {
        this.#queue = this.#queue.filter((p) => !expired.includes(p));
        const cause = this.#lastFailure ?? this.#lastError;
        for (const p of expired) {
          this.#settleReject(p, new ConnectError(`no connection to ${this.#endpoint?.text ?? 'the server'} within ${this.core.connectTimeoutMs} ms: the request was not sent`, { cause }));
        }
      }
    }
    if (this.#inFlight > 0) {
      for (const p of this.core.sentOn(this)) {
        if (now - p.sentAt > p.waitMs + this.core.responseTimeoutMs) {
          this.#teardown('response-timeout', new Error(`no reply within waitMs + ${this.core.responseTimeoutMs} ms`));
          return;
        }
      }
    }
    this.#maybeStopWatchdog();
  };
}

/**
 * A pipelining client for one ticketing server (or a cluster's allowlisted nodes).
 *
 * ```ts
 * const client = new TicketClient({ port: 7070 });
 * const r = await client.acquire('orders', { waitMs: 5_000 });
 * if (r.status === 'acquired') {
 *   try { await work(r.token); } finally { await client.release('orders', r.token); }
 * }
 * await client.close();
 * ```
 */
export class TicketClient {
  readonly leaseMs: number;
  readonly #primary: Endpoint;
  readonly #allowlist: Set<string>;
  readonly #endpoints: Endpoint[];
  readonly #acquireLane: Lane;
  readonly #releaseLane: Lane;
  /** Unsettled acquires (queued, sent, or between busy retries) by owner; same-owner acquires
   * of other keys chain through `ownerNext`. */
  readonly #acquires = new Table<PendingAcquire>();
  /** Unsettled releases by token; others with the same token chain through `tokenNext`, in the
   * order they were asked for. */
  readonly #releases = new Table<PendingRelease>();
  /** Busy-retry backoff, and whether calls retry by default. */
  readonly #busyPolicy: Required<BackoffOptions>;
  readonly #retryByDefault: boolean;
  readonly #ownerPrefix: string;
  #ownerSeq = 0;
  #leaderHint: Endpoint | undefined;
  #closed = false;
  #closing: Promise<void> | undefined;

  constructor(options: TicketClientOptions) {
    if (typeof options !== 'object' || options === null) throw new TypeError('options must be an object');
    const host = options.host ?? '127.0.0.1';
    if (typeof host !== 'string' || host.length === 0) throw new TypeError('host must be a non-empty string');
    const port = options.port;
    if (typeof port !== 'number') throw new TypeError('port must be a number');
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new RangeError(`port must be an integer in 1..65535, got ${port}`);
    this.#primary = endpoint(host, port);
    const secret = options.secret;
    if (secret !== undefined && (typeof secret !== 'string' || !isName(secret))) {
      throw new RangeError('secret must be 1-256 bytes of printable ASCII without spaces');
    }
    this.leaseMs = positive(options.leaseMs ?? 30_000, 'leaseMs');
    const cluster = options.clusterAddresses ?? [];
    if (!Array.isArray(cluster)) throw new TypeError('clusterAddresses must be an array of "host:port" strings');
    this.#endpoints = [this.#primary];
    for (const address of cluster) {
      if (typeof address !== 'string' || !isAddress(address)) throw new RangeError(`clusterAddresses: ${JSON.stringify(address)} is not host:port`);
      const parsed = parseEndpoint(address);
      if (!this.#endpoints.some((e) => e.text === parsed.text)) this.#endpoints.push(parsed);
    }
    this.#allowlist = new Set(this.#endpoints.map((e) => e.text));
    const backoff = backoffOptions(options.backoff, 'backoff', { initialMs: 50, maxMs: 5_000 });
    const errorBackoff: Record<string, number> = { ...DEFAULT_ERROR_BACKOFF };
    if (options.errorBackoffMs !== undefined) {
      if (typeof options.errorBackoffMs !== 'object' || options.errorBackoffMs === null) throw new TypeError('errorBackoffMs must be an object');
      for (const [code, ms] of Object.entries(options.errorBackoffMs)) {
        if (!(code in DEFAULT_ERROR_BACKOFF)) throw new RangeError(`errorBackoffMs: unknown error code ${code}`);
        if (ms !== undefined) errorBackoff[code] = nonNegative(ms, `errorBackoffMs.${code}`);
      }
    }
    const retry = options.retryBusy;
    if (retry !== undefined && typeof retry !== 'boolean' && (typeof retry !== 'object' || retry === null)) {
      throw new TypeError('retryBusy must be a boolean or { initialMs, maxMs }');
    }
    this.#busyPolicy = backoffOptions(typeof retry === 'object' ? retry : undefined, 'retryBusy', { initialMs: 10, maxMs: 1_000 });
    this.#retryByDefault = retry !== undefined && retry !== false;
    const maxLineBytes = options.maxLineBytes ?? DEFAULT_MAX_LINE_BYTES;
    if (!Number.isInteger(maxLineBytes) || maxLineBytes < 64) throw new RangeError('maxLineBytes must be an integer >= 64');
    const prefix = options.ownerPrefix ?? `${hostname().replace(/[^\x21-\x7e]/g, '_').slice(0, 64)}-${process.pid}-${randomBytes(4).toString('hex')}`;
    if (typeof prefix !== 'string' || !isName(prefix) || prefix.length > 200) throw new RangeError('ownerPrefix must be 1-200 bytes of printable ASCII without spaces');
    this.#ownerPrefix = `${prefix}-`;
    const core: ClientCore = {
      client: this,
      secret,
      maxLineBytes,
      connectTimeoutMs: positive(options.connectTimeoutMs ?? 10_000, 'connectTimeoutMs'),
      responseTimeoutMs: positive(options.responseTimeoutMs ?? 10_000, 'responseTimeoutMs'),
      backoff,
      errorBackoff,
      leaseMs: this.leaseMs,
      pickEndpoint: (failures) => this.#pickEndpoint(failures),
      setLeaderHint: (address, via) => this.#setLeaderHint(address, via),
      orphanRelease: (key, token) => this.#orphanRelease(key, token),
      findAcquire: (owner, key) => this.#findAcquire(owner, key),
      findRelease: (token, key) => {
        for (let p = this.#releases.get(token); p !== undefined; p = p.tokenNext) if (p.key === key && !p.blocked) return p;
        return undefined;
      },
      sentOn: (lane) => this.#sentOn(lane),
      finishAcquire: (p) => this.#removeAcquire(p),
      finishRelease: (p) => this.#finishRelease(p),
      retryBusy: (p) => this.#scheduleBusyRetry(p),
    };
    this.#acquireLane = new Lane(core, 'acquire');
    this.#releaseLane = new Lane(core, 'release');
  }

  /** The current leader hint (cluster mode), if any. */
  get leaderHint(): string | undefined {
    return this.#leaderHint?.text;
  }

  /** Requests sent and not yet answered, and requests waiting for a connection. */
  get pending(): { readonly inFlight: number; readonly queued: number } {
    return {
      inFlight: this.#acquireLane.inFlight + this.#releaseLane.inFlight,
      queued: this.#acquireLane.queued + this.#releaseLane.queued,
    };
  }

  /**
   * Asks for `key`. Resolves `acquired` (token, expiry), `timed-out` (held and `waitMs` 0, or the
   * wait ran out) or `busy` (a queue or server limit; not queued). Rejects with
   * `IndeterminateError` when the request was sent and no definitive reply came, with
   * `DuplicateRequestError` for a second pending acquire with the same (key, owner), with
   * `ConnectError` when no connection could be had to send it, and with the signal's reason when
   * aborted before sending. Bad arguments reject with TypeError/RangeError.
   */
  acquire(key: string, options: AcquireOptions = {}): Promise<AcquireResult> {
    let owner: string;
    let retry: Required<BackoffOptions> | undefined;
    let waitMs: number;
    try {
      checkKey(key);
      if (typeof options !== 'object' || options === null) throw new TypeError('options must be an object');
      waitMs = options.waitMs ?? 0;
      const signal = options.signal;
      if (typeof waitMs !== 'number') throw new TypeError('options.waitMs must be a number');
      if (!Number.isSafeInteger(waitMs) || waitMs < 0) throw new RangeError(`options.waitMs must be an integer >= 0, got ${waitMs}`);
      if (signal !== undefined && !(signal instanceof AbortSignal)) throw new TypeError('options.signal must be an AbortSignal');
      const given = options.owner;
      if (given === undefined) owner = this.#ownerPrefix + (this.#ownerSeq++).toString(36);
      else if (typeof given !== 'string') throw new TypeError('options.owner must be a string');
      else if (!isName(given)) throw new RangeError('options.owner must be 1-256 bytes of printable ASCII without spaces');
      else owner = given;
      const retryOpt = options.retryBusy;
      if (retryOpt !== undefined && typeof retryOpt !== 'boolean') throw new TypeError('options.retryBusy must be a boolean');
      retry = (retryOpt ?? this.#retryByDefault) ? this.#busyPolicy : undefined;
      if (this.#closed) throw new ClientClosedError('the client is closed');
      signal?.throwIfAborted();
      if (this.#findAcquire(owner, key) !== undefined) {
        throw new DuplicateRequestError(`an acquire of ${key} with owner ${owner} is already pending: its replies would be ambiguous`, key, owner);
      }
    } catch (error) {
      return Promise.reject(error);
    }
    const signal = options.signal;
    return new Promise<AcquireResult>((resolve, reject) => {
      const submittedAt = now();
      const p: PendingAcquire = {
        kind: 'acquire',
        key,
        owner,
        ownerNext: undefined,
        waitMs,
        deadline: submittedAt + waitMs,
        retryBusy: retry,
        attempt: 0,
        retryTimer: undefined,
        line: formatAcquire(key, owner, waitMs),
        signal,
        submittedAt,
        sentAt: -1,
        settled: false,
        lane: undefined,
        onAbort: undefined,
        resolve,
        reject,
      };
      p.ownerNext = this.#acquires.get(owner);
      this.#acquires.set(owner, p);
      this.#watchAbort(p);
      this.#acquireLane.submit(p);
    });
  }

  /**
   * Releases the grant with exactly this token (on the release lane). Resolves `released` or
   * `not-held`; rejects with `IndeterminateError` when it was sent and no reply came (releasing
   * again is safe: a token is exact, so a repeat can only say `not-held`).
   */
  release(key: string, token: bigint | string, options?: ReleaseOptions): Promise<ReleaseResult> {
    let tokenText: string;
    let signal: AbortSignal | undefined;
    try {
      checkKey(key);
      if (typeof token === 'bigint') {
        if (token < 1n || token > MAX_TOKEN) throw new RangeError('token must be in 1..2^64-1');
        tokenText = token.toString();
      } else if (typeof token === 'string') {
        if (!isTokenText(token)) throw new RangeError('token must be a canonical decimal in 1..2^64-1');
        tokenText = token;
      } else {
        throw new TypeError('token must be a bigint or a decimal string');
      }
      if (options !== undefined) {
        if (typeof options !== 'object' || options === null) throw new TypeError('options must be an object');
        signal = options.signal;
        if (signal !== undefined && !(signal instanceof AbortSignal)) throw new TypeError('options.signal must be an AbortSignal');
      }
      if (this.#closed) throw new ClientClosedError('the client is closed');
      signal?.throwIfAborted();
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#release(key, tokenText, signal);
  }

  /** Stops taking requests, rejects unsent ones (`ClientClosedError`), waits for the ones in
   * flight to settle, then closes the connections. */
  close(): Promise<void> {
    return (this.#closing ??= this.#close());
  }

  /** Closes at once: requests in flight become Indeterminate, unsent ones are rejected. */
  destroy(): void {
    this.#closed = true;
    const closed = new ClientClosedError('the client was destroyed');
    for (const lane of [this.#acquireLane, this.#releaseLane]) {
      lane.closeQueued(closed);
      lane.destroy('destroyed');
    }
    this.#rejectOffLane(closed);
  }

  /** Settles what waits off the lanes: acquires between busy retries, releases queued behind
   * one of the same token. None of them is pending on the server. */
  #rejectOffLane(error: Error): void {
    for (const head of this.#acquires.values()) {
      for (let p: PendingAcquire | undefined = head; p !== undefined; ) {
        const next: PendingAcquire | undefined = p.ownerNext;
        if (p.lane === undefined && !p.settled) {
          clearTimeout(p.retryTimer);
          p.settled = true;
          this.#removeAcquire(p);
          p.reject(error);
        }
        p = next;
      }
    }
    for (const head of this.#releases.values()) {
      for (let p: PendingRelease | undefined = head; p !== undefined; ) {
        const next: PendingRelease | undefined = p.tokenNext;
        if (p.blocked && !p.settled) {
          p.settled = true;
          this.#finishRelease(p);
          p.reject(error);
        }
        p = next;
      }
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  async #close(): Promise<void> {
    this.#closed = true;
    this.#acquireLane.closeQueued(new ClientClosedError('the client is closed'));
    await this.#acquireLane.whenIdle();
    // Releases already asked for (and orphan releases the acquires caused) still go out.
    while (this.#releases.size > 0 || this.#releaseLane.inFlight + this.#releaseLane.queued > 0) {
      await this.#releaseLane.whenIdle();
      await new Promise((resolve) => setImmediate(resolve));
    }
    this.#releaseLane.closeQueued(new ClientClosedError('the client is closed'));
    this.#rejectOffLane(new ClientClosedError('the client is closed'));
    this.#acquireLane.end();
    this.#releaseLane.end();
  }

  #release(key: string, tokenText: string, signal: AbortSignal | undefined): Promise<ReleaseResult> {
    return new Promise<ReleaseResult>((resolve, reject) => {
      const p: PendingRelease = {
        kind: 'release',
        key,
        token: BigInt(tokenText),
        tokenText,
        line: formatRelease(key, tokenText),
        waitMs: 0,
        tokenNext: undefined,
        blocked: false,
        signal,
        submittedAt: now(),
        sentAt: -1,
        settled: false,
        lane: undefined,
        onAbort: undefined,
        resolve,
        reject,
      };
      this.#watchAbort(p);
      // Two releases of one (key, token) in flight at once would make R/N ambiguous: a later one
      // waits for the earlier (and then, exact token as it is, can only get `not-held`).
      let last: PendingRelease | undefined;
      for (let q = this.#releases.get(tokenText); q !== undefined; q = q.tokenNext) {
        if (q.key === key) p.blocked = true;
        last = q;
      }
      if (last === undefined) this.#releases.set(tokenText, p);
      else last.tokenNext = p;
      if (!p.blocked) this.#releaseLane.submit(p);
    });
  }

  #finishRelease(p: PendingRelease): void {
    // Unlink it from its token's chain.
    const head = this.#releases.get(p.tokenText);
    if (head === p) {
      if (p.tokenNext === undefined) this.#releases.delete(p.tokenText);
      else this.#releases.set(p.tokenText, p.tokenNext);
    } else {
      let q = head;
      while (q !== undefined && q.tokenNext !== p) q = q.tokenNext;
      if (q !== undefined) q.tokenNext = p.tokenNext;
    }
    p.tokenNext = undefined;
    if (p.blocked) return; // it never went out: nothing waits on it
    // The next release of the same (key, token) may go now.
    for (let q = this.#releases.get(p.tokenText); q !== undefined; q = q.tokenNext) {
      if (q.key === p.key && q.blocked) {
        q.blocked = false;
        this.#releaseLane.submit(q);
        return;
      }
    }
  }

  #findAcquire(owner: string, key: string): PendingAcquire | undefined {
    for (let p = this.#acquires.get(owner); p !== undefined; p = p.ownerNext) if (p.key === key) return p;
    return undefined;
  }

  #removeAcquire(p: PendingAcquire): void {
    const head = this.#acquires.get(p.owner);
    if (head === p) {
      if (p.ownerNext === undefined) this.#acquires.delete(p.owner);
      else this.#acquires.set(p.owner, p.ownerNext);
    } else {
      let q = head;
      while (q !== undefined && q.ownerNext !== p) q = q.ownerNext;
      if (q !== undefined) q.ownerNext = p.ownerNext;
    }
    p.ownerNext = undefined;
  }

  /** Requests sent on `lane` and not settled (rare paths: teardown, the watchdog). */
  #sentOn(lane: Lane): Pending[] {
    const out: Pending[] = [];
    for (const head of this.#acquires.values()) {
      for (let p: PendingAcquire | undefined = head; p !== undefined; p = p.ownerNext) if (p.lane === lane && p.sentAt >= 0 && !p.settled) out.push(p);
    }
    for (const head of this.#releases.values()) {
      for (let p: PendingRelease | undefined = head; p !== undefined; p = p.tokenNext) if (p.lane === lane && p.sentAt >= 0 && !p.settled) out.push(p);
    }
    return out;
  }

  #watchAbort(p: Pending): void {
    const signal = p.signal;
    if (signal === undefined) return;
    p.onAbort = () => {
      if (p.settled) return;
      if (p.lane === undefined) {
        // Not on a lane: an acquire between busy retries, or a release waiting behind one of the
        // same token. Nothing of it is pending on the server.
        p.settled = true;
        if (p.kind === 'acquire') {
          clearTimeout(p.retryTimer);
          this.#removeAcquire(p);
        } else {
          this.#finishRelease(p);
        }
        p.reject(signal.reason);
        return;
      }
      p.lane.abort(p, signal.reason);
    };
    signal.addEventListener('abort', p.onAbort, { once: true });
  }

  #scheduleBusyRetry(p: PendingAcquire): boolean {
    const policy = p.retryBusy;
    if (policy === undefined || this.#closed) return false;
    const remaining = p.deadline - performance.now();
    const base = Math.min(policy.maxMs, policy.initialMs * 2 ** Math.min(p.attempt, 30));
    const delay = base * (0.5 + Math.random() * 0.5);
    if (delay >= remaining) return false;
    p.attempt++;
    p.retryTimer = setTimeout(() => {
      p.retryTimer = undefined;
      if (p.settled) return;
      if (this.#closed) {
        p.settled = true;
        this.#removeAcquire(p);
        p.reject(new ClientClosedError('the client is closed'));
        return;
      }
      const left = Math.max(0, Math.floor(p.deadline - performance.now()));
      p.waitMs = left;
      p.line = formatAcquire(p.key, p.owner, left);
      p.submittedAt = performance.now();
      this.#acquireLane.submit(p);
    }, delay);
    return true;
  }

  #orphanRelease(key: string, token: string): void {
    if (this.#closed && this.#closing === undefined) return; // destroyed: nowhere to send it
    this.#release(key, token, undefined).then(
      (result) => publish(channels.clientOrphanRelease, () => ({ client: this, key, token: BigInt(token), result })),
      (error: unknown) => publish(channels.clientOrphanRelease, () => ({ client: this, key, token: BigInt(token), error })),
    );
  }

  #pickEndpoint(failures: number): Endpoint {
    if (this.#leaderHint !== undefined && failures < 2) return this.#leaderHint;
    return this.#endpoints[failures % this.#endpoints.length]!;
  }

  #setLeaderHint(address: string | undefined, via: string): void {
    if (address === undefined) {
      if (this.#leaderHint === undefined) return;
      this.#leaderHint = undefined;
    } else {
      // Only an address we were configured with: a server must not steer us anywhere else.
      const parsed = parseEndpoint(address);
      if (!this.#allowlist.has(parsed.text)) return;
      this.#leaderHint = parsed;
    }
    publish(channels.clientLeader, () => ({ client: this, address, via }));
  }
}

function checkKey(key: unknown): asserts key is string {
  if (typeof key !== 'string') throw new TypeError('key must be a string');
  if (!isName(key)) throw new RangeError('key must be 1-256 bytes of printable ASCII without spaces');
}

function endpoint(host: string, port: number): Endpoint {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  return { host: bare, port, text: bare.includes(':') ? `[${bare}]:${port}` : `${bare}:${port}` };
}

function parseEndpoint(address: string): Endpoint {
  const colon = address.lastIndexOf(':');
  return endpoint(address.slice(0, colon), Number(address.slice(colon + 1)));
}

function describe(cause: unknown): string {
  return cause instanceof Error ? cause.message : String(cause);
}

function positive(value: unknown, what: string): number {
  if (typeof value !== 'number') throw new TypeError(`${what} must be a number`);
  if (!(value > 0 && Number.isFinite(value))) throw new RangeError(`${what} must be a finite positive number, got ${value}`);
  return value;
}

function nonNegative(value: unknown, what: string): number {
  if (typeof value !== 'number') throw new TypeError(`${what} must be a number`);
  if (!(value >= 0 && Number.isFinite(value))) throw new RangeError(`${what} must be a finite number >= 0, got ${value}`);
  return value;
}

function backoffOptions(value: BackoffOptions | undefined, what: string, defaults: Required<BackoffOptions>): Required<BackoffOptions> {
  if (value === undefined) return defaults;
  if (typeof value !== 'object' || value === null) throw new TypeError(`${what} must be an object`);
  const initialMs = positive(value.initialMs ?? defaults.initialMs, `${what}.initialMs`);
  const maxMs = positive(value.maxMs ?? defaults.maxMs, `${what}.maxMs`);
  if (maxMs < initialMs) throw new RangeError(`${what}.maxMs must be >= ${what}.initialMs`);
  return { initialMs, maxMs };
}
