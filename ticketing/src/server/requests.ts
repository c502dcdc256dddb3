/**
 * Request lines: parsing (the framing is the connection's LineFramer), authentication by the `H`
 * secret, the cluster gate's refusal, and the commands the lines become.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { RequestReader, SERVING_LINE } from '../protocol.js';
import type { Command } from '../state-types.js';
import type { CommandApplier } from './applier.js';
import type { Closer } from './closer.js';
import type { ServerGate } from './cluster-host.js';
import type { Connection } from './connection.js';
import type { Observers } from './observers.js';
import type { Outbox } from './replies.js';

export class RequestHandler {
  #secretDigest: Buffer | undefined;
  readonly #request = new RequestReader();
  readonly #acquireCommand: Mutable<Extract<Command, { type: 'acquire' }>> = {
    type: 'acquire',
    session: 0,
    key: '',
    owner: '',
    waitMs: 0,
    mode: 'x',
  };
  readonly #releaseCommand: Mutable<Extract<Command, { type: 'release' }>> = {
    type: 'release',
    session: 0,
    key: '',
    token: 0n,
  };

  constructor(
    secret: string | undefined,
    private readonly applier: CommandApplier,
    private readonly closer: Closer,
    /** Cluster mode: may refuse requests (this node does not lead). */
    private readonly gate: Pick<ServerGate, 'refusal'> | undefined,
    /** Where the leader probe's answer goes. */
    private readonly outbox: Pick<Outbox, 'send'>,
    /** `O` and `U`. */
    private readonly observers: Pick<Observers, 'observe' | 'unobserve'>,
  ) {
    this.setSecret(secret);
  }

  /** New connections must send `H <secret>` first (undefined: no secret). Open ones are not
   * asked again. */
  setSecret(secret: string | undefined): void {
    this.#secretDigest = secret === undefined ? undefined : digest(secret);
  }

  /** Whether `secret` is the current one (true when there is none), in constant time. */
  authorizes(secret: string | undefined): boolean {
    const expected = this.#secretDigest;
    if (expected === undefined) return true;
    return secret !== undefined && timingSafeEqual(digest(secret), expected);
  }

  get needsAuth(): boolean {
    return this.#secretDigest !== undefined;
  }

  /** One request line. Returns false to stop reading this connection's buffered lines (it is
   * closing). */
  readonly handleLine = (conn: Connection, buf: Buffer, start: number, end: number): boolean => {
    if (conn.closing) return false;
    const { applier, closer } = this;
    const request = this.#request.read(buf, start, end);
    const fresh = conn.fresh;
    conn.fresh = false;
    if (request.op === 'error') {
      closer.fail(conn, 'bad_request', request.detail, 'bad_request');
      return false;
    }
    if (!conn.authed) {
      if (request.op !== 'H' || !this.authorizes(request.secret)) {
        closer.fail(conn, 'auth_failed', undefined, 'auth_failed');
        return false;
      }
      conn.authed = true;
      clearTimeout(conn.authTimer);
      conn.authTimer = undefined;
      return true;
    }
    const gate = this.gate;
    if (gate !== undefined && request.op !== 'H') {
      const refusal = gate.refusal();
      if (refusal !== undefined) {
        closer.closeWith(conn, refusal, 'refused');
        return false;
      }
    }
    switch (request.op) {
      case 'A': {
        // One command object, refilled per request: the state machine keeps none of it.
        const command = this.#acquireCommand;
        command.session = conn.id;
        command.key = request.key;
        command.owner = request.owner;
        command.waitMs = request.waitMs;
        command.mode = request.mode;
        applier.apply(command);
        break;
      }
      case 'K':
        applier.apply({ type: 'keep', session: conn.id, key: request.key, token: request.token });
        break;
      case 'R': {
        const command = this.#releaseCommand;
        command.session = conn.id;
        command.key = request.key;
        command.token = request.token;
        applier.apply(command);
        break;
      }
      case 'P':
        applier.apply({
          type: 'publish',
          session: conn.id,
          key: request.key,
          token: request.token,
          value: request.value,
        });
        break;
      case 'O':
        this.observers.observe(conn, request.key);
        break;
      case 'U':
        this.observers.unobserve(conn, request.key);
        break;
      case 'W':
        // The leader probe: it passed the gate, so this node applies requests (in cluster mode: it
        // leads, has caught up, and its lease was confirmed just now). Nothing to hold for a commit.
        this.outbox.send(conn, SERVING_LINE);
        break;
      case 'H':
        // A secretless server accepts (and ignores) H as the first line, so a client configured
        // with a secret still works; anywhere else H is out of place.
        if (!fresh || this.#secretDigest !== undefined) {
          closer.fail(conn, 'bad_request', 'H must be the first line', 'bad_request');
          return false;
        }
        break;
    }
    return true;
  };
}

function digest(secret: string): Buffer {
  return createHash('sha256').update(secret, 'latin1').digest();
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] };
