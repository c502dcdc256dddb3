/**
 * The live console's server side, behind the HTTP endpoint (http.ts): the page's files, the
 * node's status (`GET /v1/node`) and the event streams of `GET /v1/locks/events`.
 *
 * Read-only and fed from outside the state machine: the server's effects (diagnostics_channel)
 * say which keys changed, and the rows are read again with the server's read-only queries. The
 * keys that changed are gathered and handed to the streams every `FLUSH_MS`, so a hot key costs
 * one row per flush however often it changes. At most `maxStreams` streams are open at once.
 */
import type http from 'node:http';
import { channels } from '../events.js';
import type { Effect } from '../state-types.js';
import { loadAssets, type Asset } from './console-assets.js';
import { LockRows, type RowServer } from './lock-rows.js';
import { LockStream, type StreamLimits } from './lock-stream.js';
import { NodeStatus, type NodeView, type StatusNode, type StatusServer } from './node-status.js';
import { Subscriptions } from './subscriptions.js';

export interface ConsoleOptions {
  readonly server: RowServer & StatusServer;
  /** Cluster mode: the server's node. */
  readonly node?: StatusNode | undefined;
  /** Whether the endpoint serves HTTPS, and its port once it listens: a follower links to the
   * leader's console at the leader's host on the same port (every node serving `--http` on one
   * port). */
  readonly secure: boolean;
  readonly port: () => number | undefined;
  /** Event streams open at once, at most. Default 8. */
  readonly maxStreams?: number;
}

type Reply = Asset;

/** How often the keys that changed are sent. */
const FLUSH_MS = 200;
/** How often every stream gets a `node` event (and a check that its secret still opens it). */
const NODE_EVERY_MS = 1_000;
/** How long `close()` waits for the streams' last event to be written. */
const SHUTDOWN_MS = 500;
/** As `GET /v1/locks`'s `prefix`. */
const MAX_PREFIX_BYTES = 256;
const STREAM_LIMITS: StreamLimits = {
  maxKeys: 10_000,
  maxBufferedBytes: 256 * 1024,
  resnapshotMs: 1_000,
  stallMs: 30_000,
};

const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-store',
  'x-content-type-options': 'nosniff',
};

export class LockConsole {
  readonly #rows: LockRows;
  readonly #status: NodeStatus;
  readonly #assets: Map<string, Asset>;
  readonly #subscriptions: Subscriptions;
  readonly #maxStreams: number;
  /** Each open stream, and whether the credentials that opened it still would. */
  readonly #streams = new Map<LockStream, () => boolean>();
  /** Keys that changed since the last flush (gathered only while a stream is open). */
  readonly #changed = new Set<string>();
  #ticker: NodeJS.Timeout | undefined;
  #lastNodeTick = 0;

  constructor(options: ConsoleOptions) {
    const { server, node } = options;
    this.#rows = new LockRows(server);
    this.#maxStreams = options.maxStreams ?? 8;
    this.#assets = loadAssets();
    const scheme = options.secure ? 'https' : 'http';
    this.#status = new NodeStatus({
      server,
      node,
      consoleOf: (advertise) => {
        const port = options.port();
        const host = advertise.slice(0, advertise.lastIndexOf(':'));
        return port === undefined || host === '' ? undefined : `${scheme}://${host}:${port}/`;
      },
      onChange: () => {
        for (const stream of this.#streams.keys()) stream.nodeChanged();
      },
    });
    this.#subscriptions = new Subscriptions(server, node);
    this.#subscriptions.on<{ effect: Effect }>(channels.serverEffect, ({ effect }) => {
      if (this.#streams.size > 0 && 'key' in effect) this.#changed.add(effect.key);
    });
    // A new leader serves a table rebuilt from etcd, a follower none: every stream starts over.
    this.#subscriptions.on(channels.clusterRole, () => {
      for (const stream of this.#streams.keys()) stream.reset();
    });
  }

  /** The page's files by URL path (`/`, `/console/<file>`). */
  get assets(): ReadonlyMap<string, Reply> {
    return this.#assets;
  }

  nodeView(): NodeView {
    return this.#status.view();
  }

  /**
   * `GET /v1/locks/events?prefix=`: answers the request with a stream (undefined), or refuses it
   * (a reply). `authorized` says whether the request's credentials still open it (checked every
   * second: a replaced secret ends the stream with an `unauthorized` event).
   */
  stream(
    url: URL,
    request: http.IncomingMessage,
    response: http.ServerResponse,
    authorized: () => boolean,
  ): Reply | undefined {
    const prefix = url.searchParams.get('prefix') ?? '';
    for (const name of url.searchParams.keys()) {
      if (name !== 'prefix') return json(400, { error: 'bad_request', detail: `unknown parameter ${name}` });
    }
    if (url.searchParams.getAll('prefix').length > 1)
      return json(400, { error: 'bad_request', detail: 'prefix given more than once' });
    if (Buffer.byteLength(prefix) > MAX_PREFIX_BYTES)
      return json(400, { error: 'bad_request', detail: `prefix exceeds ${MAX_PREFIX_BYTES} bytes` });
    if (this.#streams.size >= this.#maxStreams) {
      const refused = json(503, { error: 'too_many_streams', max: this.#maxStreams });
      return { ...refused, headers: { ...refused.headers, 'retry-after': '5' } };
    }
    if (request.method === 'HEAD') return { status: 200, body: '', headers: SSE_HEADERS };
    request.socket.setNoDelay(true);
    response.writeHead(200, SSE_HEADERS);
    const stream = new LockStream(response, this.#rows, prefix, STREAM_LIMITS, () => this.#status.view());
    this.#streams.set(stream, authorized);
    response.once('close', () => {
      this.#streams.delete(stream);
      if (this.#streams.size === 0) this.#stop();
    });
    stream.flush(performance.now());
    this.#ticker ??= setInterval(() => this.#tick(), FLUSH_MS).unref();
    return undefined;
  }

  /** Stops feeding (unsubscribes) and ends every stream with a `shutdown` event, waiting at most
   * `SHUTDOWN_MS` for them to be written (a reader then sees the stream end, not break). */
  async close(): Promise<void> {
    this.#stop();
    this.#subscriptions.close();
    this.#status.close();
    const ended = [...this.#streams.keys()].map((stream) => stream.end('shutdown'));
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, SHUTDOWN_MS)));
    await Promise.race([Promise.all(ended), late]);
    clearTimeout(timer);
  }

  #stop(): void {
    clearInterval(this.#ticker);
    this.#ticker = undefined;
    this.#changed.clear();
  }

  #tick(): void {
    const now = performance.now();
    const streams = this.#streams;
    if (this.#changed.size > 0) {
      for (const stream of streams.keys()) stream.changed(this.#changed);
      this.#changed.clear();
    }
    if (now - this.#lastNodeTick >= NODE_EVERY_MS) {
      this.#lastNodeTick = now;
      for (const [stream, authorized] of streams) {
        if (authorized()) stream.nodeChanged();
        else void stream.end('unauthorized');
      }
    }
    for (const stream of streams.keys()) stream.flush(now);
  }
}

function json(status: number, value: unknown): Reply {
  return { status, body: `${JSON.stringify(value)}\n`, headers: { 'content-type': 'application/json' } };
}
