/**
 * The connection lane: one connection and the requests on it. It queues unsent requests, probes
 * every new connection (`W`: does this node apply requests?) before it sends any, writes every
 * request of a turn in one write, matches replies to sent requests through the registry,
 * reconnects with backoff while it has work, and watches the time limits (an unsent request's
 * waitMs, or connectTimeoutMs when that is 0; waitMs + responseTimeoutMs for sent ones). A connection that fails takes its
 * sent requests with it (Indeterminate, unless the server refused them outright), never its
 * unsent ones. The client runs three: one for acquires, one reserved for releases and keeps, and
 * one for publishes and observations (its tenant, observations.ts, which keeps it connected while
 * anything is observed and is handed the replies the lane does not match).
 */
import type net from 'node:net';
import { performance } from 'node:perf_hooks';
import { freshNow, leaseEnd, now, wallClock } from './clock.js';
import type { Endpoint, ResolvedClientOptions } from './options.js';
import {
  CertificateError,
  ClientClosedError,
  ProtocolError,
  ServerError,
  TlsMismatchError,
  UnlistedLeaderError,
  type IndeterminateReason,
} from '../errors.js';
import { channels, publish } from '../events.js';
import { endedRequestError, lockGone, salvageGrant, type ConnectionEnd, type RefusalClass } from './outcomes.js';
import { UNMATCHED, refusedRequest, settleRefused, slotAnswers } from './answers.js';
import { backoffDelay } from './backoff.js';
import { REFUSALS, notSentInTime, plainTextPeer, unlistedLeader, whenTlsPeer } from './refusals.js';
import { isCertificateError, openSocket } from './transport.js';
import type { Observations } from './observations.js';
import { isSentOn, type Pending, type PendingAcquire, type PendingRegistry } from './pending.js';
import { RttWindow } from './rtt.js';
import { LineFramer, SERVING_LINE, formatAcquire, formatHello, parseReply, splitReply } from '../protocol.js';
import { isPlainTextPeer } from '../tls-sniff.js';

/** What a lane asks of the client that owns it. */
export interface LaneHost {
  /** For diagnostics messages. */
  readonly client: object;
  /** The current leader hint (`host:port`), if any. */
  readonly leaderHint: string | undefined;
  /** The address to connect to after `failures` consecutive failures. */
  pickEndpoint(failures: number): Endpoint;
  /** Sets (or with undefined drops) the leader hint; false if the address is not allowlisted. */
  setLeaderHint(address: string | undefined, via: string): boolean;
  /** Hands a grant nobody can take back by its exact token (on the release lane). */
  orphanRelease(key: string, token: string): void;
  /** Schedules a busy acquire's retry; false when its budget does not allow one. */
  retryBusy(p: PendingAcquire): boolean;
}

const BACKOFF_ERRORS = new Set<string>(['no_leader', 'not_active', 'auth_failed', 'capacity']);

/**
 * One connection and its requests: queued (unsent) ones, and sent ones indexed for matching.
 * Reconnects with backoff while it has work; a connection that fails takes its sent requests
 * with it (Indeterminate), never its unsent ones.
 */
export class Lane {
  #socket: net.Socket | undefined;
  /** `probing`: connected, the `W` probe sent, no request yet (they wait for the node's `W`). */
  #state: 'idle' | 'connecting' | 'probing' | 'open' | 'backoff' = 'idle';
  #framer: LineFramer;
  #queue: Pending[] = [];
  /** Requests sent on the current connection and not settled. */
  #inFlight = 0;
  #flushScheduled = false;
  #failures = 0;
  /** The current socket's error, and the cause of the last teardown (for ConnectError). */
  #lastError: unknown;
  #lastFailure: unknown;
  /** Bytes arrived on the current connection (a TLS server says nothing to plain text). */
  #heard = false;
  /** A reply to a request (A/T/B/R/N) arrived on the current connection. */
  #answered = false;
  #idleWaiters: Array<() => void> = [];
  #retryTimer: NodeJS.Timeout | undefined;
  #connectTimer: NodeJS.Timeout | undefined;
  #watchdog: NodeJS.Timeout | undefined;
  #endpoint: Endpoint | undefined;
  /** Recent round trips of requests that could not have waited. */
  readonly #rtt = new RttWindow();
  /** Unsent requests that were queued when a connection failed. */
  readonly #delayed = new WeakSet<Pending>();
  #closed = false;

  constructor(
    readonly options: ResolvedClientOptions,
    readonly registry: PendingRegistry,
    readonly host: LaneHost,
    readonly role: 'acquire' | 'release' | 'observe',
    readonly tenant?: Observations,
  ) {
    this.#framer = new LineFramer(options.maxLineBytes);
  }

  get inFlight(): number {
    return this.#inFlight;
  }
  get queued(): number {
    return this.#queue.length;
  }

  /** There is work for a connection: a queued request, or the tenant's observations. */
  #wanted(): boolean {
    return !this.#closed && (this.#queue.length > 0 || this.tenant?.wanted === true);
  }

  /** Writes a tenant's line now if the connection serves (true); otherwise makes sure one is on its
   * way while there is work (false): the tenant's `opened()` sends what it starts with. */
  send(line: string): boolean {
    const open = this.#state === 'open';
    if (open) this.#socket!.write(line, 'latin1');
    else if (this.#state === 'idle' && this.#wanted()) this.#connect();
    else if (this.#state === 'backoff' && this.#wanted()) this.#retryTimer?.ref();
    return open;
  }

  /** A sent request answered: settled here, resolved or rejected by the caller. */
  answered(p: Pending, sample = true): void {
    if (sample) this.#rtt.add(now() - p.sentAt);
    this.#failures = 0;
    this.#answered = true;
    this.#settle(p);
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
    else if (this.#state === 'backoff')
      this.#retryTimer?.ref(); // there is work to wait for now
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
    this.#teardown(
      'connection-lost',
      new Error('the connection was closed because another request sent on it was aborted'),
      undefined,
      { p, reason },
    );
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
    const endpoint = this.host.pickEndpoint(this.#failures);
    this.#endpoint = endpoint;
    this.#state = 'connecting';
    this.#heard = false;
    this.#answered = false;
    this.#framer = new LineFramer(this.options.maxLineBytes);
    const { socket, ready } = openSocket(endpoint.host, endpoint.port, this.options.tls);
    this.#socket = socket;
    const limitMs = Math.min(this.options.connectTimeoutMs, 5_000);
    // Covers connecting, the TLS handshake and the probe's answer.
    this.#connectTimer = setTimeout(() => {
      if (this.#socket !== socket) return;
      const what = this.#state === 'probing' ? 'no answer to the leader probe from' : 'no connection to';
      this.#teardown('connection-lost', new Error(`${what} ${endpoint.text} within ${limitMs} ms`));
    }, limitMs).unref();
    socket.on(ready, () => {
      if (this.#socket !== socket) return;
      // Requests wait until this node answers the probe: only a node that applies requests gets any.
      this.#state = 'probing';
      const hello = this.options.secret === undefined ? '' : formatHello(this.options.secret);
      socket.write(hello + SERVING_LINE, 'latin1');
    });
    socket.on('data', (chunk: Buffer) => {
      if (this.#socket !== socket) return;
      this.#heard = true;
      freshNow(); // when these replies arrived, for everything matched below
      const framer = this.#framer;
      const status = framer.push(chunk, this.#onLine);
      if (status === 'too_long' && this.#socket === socket && this.#framer === framer) {
        this.#teardown('connection-lost', new ProtocolError(`reply line exceeds ${this.options.maxLineBytes} bytes`));
      }
    });
    socket.on('error', (error) => {
      if (this.#socket === socket) this.#lastError = error;
    });
    socket.on('close', () => {
      if (this.#socket !== socket) return;
      if (
        this.#state === 'open' &&
        this.#inFlight === 0 &&
        this.tenant?.wanted !== true && // an observing connection is never idle: its end is a failure
        this.#lastError === undefined &&
        this.#framer.bufferedBytes === 0
      ) {
        this.#closedWhileIdle();
        return;
      }
      const error = this.#lastError;
      if (isCertificateError(error)) this.#refuseAll(CertificateError, error);
      else if (this.options.tls !== undefined && isPlainTextPeer(error))
        this.#refuseAll(TlsMismatchError, plainTextPeer(endpoint.text));
      else this.#teardown('connection-lost', error ?? new Error('connection closed by the server'));
    });
  }

  readonly #flush = (): void => {
    this.#flushScheduled = false;
    const socket = this.#socket;
    if (this.#state !== 'open' || socket === undefined) return;
    let out = '';
    const sentAt = freshNow();
    const queue = this.#queue;
    this.#queue = [];
    for (const p of queue) {
      if (p.settled) continue;
      if (p.kind === 'acquire' && p.waitMs > 0 && this.#delayed.has(p)) {
        // It waited through a failed connection for a serving node: that time came out of its
        // wait, and the server gets what is left.
        const left = Math.max(0, Math.floor(p.deadline - sentAt));
        if (left < p.waitMs) {
          p.waitMs = left;
          p.line = formatAcquire(p.key, p.owner, left, p.mode);
        }
      }
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
   * Fast path: an answer whose (key, identifier) equals a pending request's is well-formed in
   * those fields by construction (ours were validated), so `splitReply` checks only its shape;
   * everything else takes the full parse, which tells malformed from unmatched.
   */
  readonly #onLine = (line: string): boolean => {
    const answer = splitReply(line);
    if (answer !== undefined) {
      switch (answer.op) {
        case 'A': {
          const p = this.registry.findAcquire(answer.owner, answer.key);
          if (!isSentOn(p, this) || !slotAnswers(answer.slot, p.permits)) break;
          this.#granted(p, answer.token, answer.slot);
          return true;
        }
        case 'T':
        case 'B':
        case 'C':
        case 'F': {
          const p = refusedRequest(this.registry, this, answer);
          if (p === undefined) break;
          this.#refused(p, answer.op);
          return true;
        }
        case 'R':
        case 'N': {
          const p = this.registry.findRelease(answer.token, answer.key);
          if (!isSentOn(p, this)) break;
          this.answered(p);
          p.resolve({ status: answer.op === 'R' ? 'released' : 'not-held', key: p.key, token: p.token });
          return true;
        }
        case 'K':
        case 'G': {
          const p = this.registry.findKeep(answer.token, answer.key);
          if (!isSentOn(p, this)) break;
          this.answered(p);
          if (answer.op === 'K') p.resolve({ key: p.key, token: p.token, leaseMs: answer.leaseMs, sentAt: p.sentAt });
          else p.reject(lockGone(p.key, p.token));
          return true;
        }
      }
    }
    return this.#onOtherLine(line);
  };

  #granted(p: PendingAcquire, token: string, slot: number | undefined): void {
    const receivedAt = now();
    // Earliest instant the server can have granted it: not before the request was sent, and (for
    // a grant that waited) not before a recent round trip ago.
    const rtt = p.waitMs === 0 ? undefined : this.#rtt.recent;
    const grantedNotBefore = rtt === undefined ? p.sentAt : Math.max(p.sentAt, receivedAt - rtt);
    const expiresAt = wallClock(leaseEnd(grantedNotBefore, this.options.leaseMs), receivedAt);
    this.answered(p, p.waitMs === 0);
    p.resolve({ status: 'acquired', key: p.key, owner: p.owner, token: BigInt(token), expiresAt, slot });
  }

  /** `T`, `B`, or `C` (the mode does not fit the key's kind: rejected, nothing granted or queued),
   * or `F` to any request (forbidden: rejected, nothing changed). */
  #refused(p: Pending, op: 'T' | 'B' | 'C' | 'F'): void {
    if (op === 'B' && p.kind === 'acquire' && this.host.retryBusy(p)) {
      this.#rtt.add(now() - p.sentAt);
      this.#failures = 0;
      this.#answered = true;
      // Not settled: it goes back to the queue after a backoff, with what is left of its wait
      // budget (same owner: B is definitive, nothing is pending under it).
      this.#detach(p);
      return;
    }
    this.answered(p, p.kind !== 'acquire' || p.waitMs === 0 || op === 'B');
    settleRefused(p, op);
  }

  /** Replies off the fast path: malformed, unmatched, M, L, E — or matched ones in odd shapes. */
  #onOtherLine(line: string): boolean {
    const reply = parseReply(line);
    if (reply === undefined) {
      this.#teardown('connection-lost', new ProtocolError('malformed or unknown reply', line));
      return false;
    }
    if (this.tenant?.take(reply) === true) {
      this.#failures = 0; // its replies (publish answers, views) say this node serves, as answers do
      return true;
    }
    switch (reply.op) {
      // A well-formed answer reaches this point only when it matched nothing (see #onLine).
      case 'A':
        // A grant nobody waits for: hand it back by its exact token, then close (the session is
        // out of step with the server).
        this.host.orphanRelease(reply.key, reply.token);
        this.#teardown('connection-lost', new ProtocolError('a grant matches no pending acquire', line));
        return false;
      case 'T':
      case 'B':
      case 'C':
      case 'F':
      case 'R':
      case 'N':
      case 'K':
      case 'G':
        this.#teardown('connection-lost', new ProtocolError(`a reply matches no pending ${UNMATCHED[reply.op]}`, line));
        return false;
      case 'L':
        this.host.setLeaderHint(reply.address, 'L');
        return true;
      case 'W': {
        if (this.#state !== 'probing') break;
        const endpointText = this.#endpoint?.text;
        // This node applies requests: send what waited for it.
        clearTimeout(this.#connectTimer);
        this.#state = 'open';
        this.tenant?.opened(); // its lines go first
        publish(channels.clientConnect, () => ({ client: this.host.client, lane: this.role, address: endpointText }));
        this.#flush();
        return true;
      }
      case 'M': {
        const moved = new ServerError('moved', `the leader is ${reply.address}`);
        const listed = this.host.setLeaderHint(reply.address, 'M');
        // A redirect to a known node, not a failure: the next connection goes to the leader (the
        // hint is used while failures < 2), however many failures came before. A node steering us
        // outside the allowlist is no leader to come back to: drop the hint, so the next
        // connection tries the next listed address.
        if (listed) this.#failures = 0;
        else if (this.host.leaderHint === this.#endpoint?.text) this.host.setLeaderHint(undefined, 'M');
        // Nothing unsent can reach an unlisted leader: say so now rather than let it time out.
        const unreachable = listed ? [] : this.#takeQueue();
        this.#teardown('connection-lost', moved);
        if (!listed)
          this.#refuse(unreachable, UnlistedLeaderError, unlistedLeader(reply.address, this.options.endpoints, moved));
        return false;
      }
      case 'E': {
        const error = new ServerError(reply.code, reply.detail);
        if (reply.code === 'no_leader') this.host.setLeaderHint(undefined, 'no_leader');
        const floor = BACKOFF_ERRORS.has(reply.code) ? this.options.errorBackoff[reply.code] : undefined;
        // Definite refusals. The server sends `E capacity` on accept, before reading a byte, and
        // `E auth_failed` instead of processing anything after a bad or missing `H`; it discards
        // whatever follows until it closes. So while no request on this connection has been
        // answered, every request sent on it, even one written (pipelined) before the E arrived,
        // was never processed: it is refused, not Indeterminate. After an answer these codes
        // would break the protocol, and the usual rule (Indeterminate) applies.
        const refused = this.#answered ? undefined : REFUSALS.get(reply.code);
        // Before the probe's answer, what waits for this connection is refused with it (a certificate
        // refusal: whatever waits on this lane, as no connection can succeed until it changes).
        if (refused === CertificateError || (refused !== undefined && this.#state === 'probing'))
          this.#refuseAll(refused, error);
        else this.#teardown('connection-lost', error, floor, undefined, refused);
        return false;
      }
    }
    this.#teardown('connection-lost', new ProtocolError('a reply out of place', line));
    return false;
  }

  /**
   * Closes the connection. Every sent request without a reply becomes Indeterminate (an aborted
   * one with reason `aborted` and the signal's reason as cause), or, when the server `refused` the
   * connection, that refusal; unsent requests stay queued for the next connection, which is
   * attempted after a backoff if there is work.
   */
  #teardown(
    reason: IndeterminateReason,
    cause: unknown,
    floorMs?: number,
    aborted?: { p: Pending; reason: unknown },
    refused?: RefusalClass,
  ): void {
    const socket = this.#socket;
    if (socket === undefined) return;
    if (this.#state === 'probing' && !this.#heard && !this.options.tls && !refused) {
      // Closed (or left) without a word before the probe's answer: if the node speaks TLS, nothing
      // unsent can go out until this client has a `tls` option.
      whenTlsPeer(this.#endpoint!, (advice) => {
        if (!this.#closed) this.#refuse(this.#takeQueue(), TlsMismatchError, advice);
        this.#maybeStopWatchdog();
      });
    }
    this.#socket = undefined;
    clearTimeout(this.#connectTimer);
    const partial = this.#framer.partialLine();
    this.#framer = new LineFramer(this.options.maxLineBytes);
    socket.destroy();
    this.#lastError = undefined;
    this.#lastFailure = cause;
    const sent = this.registry.sentOn(this);
    const salvaged = partial === undefined ? undefined : salvageGrant(partial, sent);
    // Acquires first (sentOn lists them first), so a salvaged grant's acquire learns its token
    // before its orphan release goes out.
    for (const p of sent) {
      const end: ConnectionEnd =
        refused !== undefined
          ? { kind: 'refused', error: refused, cause }
          : aborted?.p === p
            ? { kind: 'aborted', cause: aborted.reason }
            : { kind: 'lost', reason, cause };
      const token = salvaged?.p === p ? salvaged.token : undefined;
      this.#settleReject(p, endedRequestError(p, end, token), end.kind !== 'refused');
    }
    for (const p of this.#queue) this.#delayed.add(p);
    this.tenant?.lost(refused === undefined ? undefined : { error: refused, cause });
    // A close the caller asked for (an abort) says nothing about the server: no backoff for it.
    if (aborted === undefined) this.#failures++;
    clearTimeout(this.#retryTimer);
    if (this.#closed) {
      this.#state = 'idle';
    } else {
      const delay = aborted === undefined ? backoffDelay(this.#failures, this.options.backoff, floorMs) : 0;
      this.#state = 'backoff';
      this.#retryTimer = setTimeout(() => {
        this.#state = 'idle';
        if (this.#wanted()) this.#connect();
      }, delay);
      if (!this.#wanted()) this.#retryTimer.unref();
      this.#publishClose(reason, cause, delay);
    }
    if (salvaged !== undefined) this.host.orphanRelease(salvaged.p.key, salvaged.tokenText);
    this.#maybeStopWatchdog();
  }

  /** A refusal of the connection (a certificate, auth, capacity, a TLS mismatch): no request of it
   * was processed, and the queued ones, which waited for it, are refused with it. */
  #refuseAll(refused: RefusalClass, error: unknown): void {
    const queued = this.#takeQueue();
    this.#teardown('connection-lost', error, undefined, undefined, refused);
    this.#refuse(queued, refused, error);
  }

  #takeQueue(): Pending[] {
    const queued = this.#queue;
    this.#queue = [];
    return queued;
  }

  #refuse(queued: readonly Pending[], refused: RefusalClass, cause: unknown): void {
    const end = { kind: 'refused', error: refused, cause } as const;
    for (const p of queued) this.#settleReject(p, endedRequestError(p, end));
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
    this.tenant?.lost();
    this.#publishClose('idle', undefined, 0);
    if (this.#wanted()) this.#connect();
  }

  #publishClose(reason: string, error: unknown, backoffMs: number): void {
    const address = this.#endpoint?.text;
    publish(channels.clientClose, () => ({
      client: this.host.client,
      lane: this.role,
      address,
      reason,
      error,
      backoffMs,
    }));
  }

  #settle(p: Pending): void {
    if (p.sentAt >= 0 && p.lane === this) this.#inFlight--;
    p.settled = true;
    if (p.onAbort !== undefined) p.signal!.removeEventListener('abort', p.onAbort);
    if (p.kind === 'acquire') clearTimeout(p.retryTimer);
    this.registry.remove(p);
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
    if (indeterminate) publish(channels.clientIndeterminate, () => ({ client: this.host.client, error }));
    p.reject(error);
  }

  // -------------------------------------------------------------------------------------------
  // Timeouts: a request waits for a connection at most connectTimeoutMs (then it was never sent:
  // ConnectError); a sent one gets its waitMs plus responseTimeoutMs before the connection is
  // declared dead (then it is Indeterminate).

  #startWatchdog(): void {
    if (this.#watchdog !== undefined) return;
    const tick = Math.max(
      5,
      Math.min(1_000, Math.min(this.options.connectTimeoutMs, this.options.responseTimeoutMs) / 4),
    );
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
      // An unsent request waits for a serving node within its own waitMs (connectTimeoutMs if 0).
      const expired = this.#queue.filter((p) => now - p.submittedAt > (p.waitMs || this.options.connectTimeoutMs));
      if (expired.length > 0) {
        this.#queue = this.#queue.filter((p) => !expired.includes(p));
        const cause = this.#lastFailure ?? this.#lastError;
        for (const p of expired) {
          this.#settleReject(p, notSentInTime(p.waitMs || this.options.connectTimeoutMs, this.#endpoint, cause));
        }
      }
    }
    if (this.#inFlight > 0) {
      for (const p of this.registry.sentOn(this)) {
        if (now - p.sentAt > p.waitMs + this.options.responseTimeoutMs) {
          this.#teardown(
            'response-timeout',
            new Error(`no reply within waitMs + ${this.options.responseTimeoutMs} ms`),
          );
          return;
        }
      }
    }
    this.#maybeStopWatchdog();
  };
}
