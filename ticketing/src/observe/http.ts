/**
 * The HTTP endpoint of a server (`ticketing serve --http`): health and readiness for probes and
 * load balancers, Prometheus metrics, a JSON view of the held locks, and the live console (its
 * page at `/`, `/v1/node` and the event stream `/v1/locks/events`: console.ts). Over HTTPS when
 * given a certificate; client certificates are asked for only with `clientCertificates` (access
 * control identifies a reader by its CN). It only reads: the server's queries (`readiness`,
 * `locks`, `readableBy`, `authorizes`, …) and the metrics registry.
 *
 * Bounded: a request must arrive whole within `requestTimeoutMs`, idle keep-alive connections are
 * closed after it, at most `maxConnections` are open, and one listing returns at most `MAX_LIMIT`
 * locks.
 */
import { once } from 'node:events';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { SecureContextOptions, TLSSocket } from 'node:tls';
import type { LockView } from '../server/server.js';
import { DEFAULT_LOCKS_LIMIT } from '../server/server.js';
import { LockConsole, type ConsoleOptions } from './console.js';
import { holderRows } from './lock-rows.js';

/** What the endpoint asks of the server (the console asks for a few more queries). */
interface EndpointServer extends Pick<ConsoleOptions['server'], 'lock' | 'inspect' | 'stats' | 'leaseMs'> {
  /** Would a request sent now be served (a leader, a follower that redirects, single mode)? */
  readiness(): { readonly ready: boolean; readonly reason?: string | undefined; readonly leader?: string | undefined };
  locks(options: {
    readonly prefix: string;
    readonly limit: number;
    readonly readable: (key: string) => boolean;
  }): readonly LockView[];
  /** Whether `secret` (from `Authorization: Bearer`), or the client certificate's CN, opens every
   * view; true when the server has no secret. */
  authorizes(secret: string | undefined, cn?: string): boolean;
  /** The keys the bearer of `secret` or `cn` may list; undefined: none (401). */
  readableBy(secret: string | undefined, cn?: string): ((key: string) => boolean) | undefined;
}

/** What the endpoint serves at `/metrics`. */
interface EndpointMetrics {
  metrics(): Promise<string>;
  readonly contentType: string;
}

export interface HttpEndpointOptions {
  readonly server: EndpointServer;
  readonly metrics: EndpointMetrics;
  /** Cluster mode: the server's node (the console shows its role and the leader). */
  readonly node?: ConsoleOptions['node'];
  /** Address to listen on. Default `127.0.0.1`. */
  readonly host?: string;
  /** Port; 0 (the default) picks a free one. */
  readonly port?: number;
  /** Serve HTTPS with this certificate and key (`cert`, `key`, …); `setTls` replaces it. */
  readonly tls?: SecureContextOptions | undefined;
  /** With `tls` (its `ca`): ask clients for a certificate, optional, whose verified CN names the
   * reader (access control). Default false. */
  readonly clientCertificates?: boolean;
  /** A request's headers must arrive within this long, the whole request too. Default 5000 ms. */
  readonly requestTimeoutMs?: number;
  /** Open connections at most. Default 64. */
  readonly maxConnections?: number;
}

/** `GET /v1/locks`: `limit` when none is given, and the largest one accepted. */
export const MAX_LIMIT = 10_000;
const MAX_PREFIX_BYTES = 256;

type Reply = { readonly status: number; readonly body: string; readonly headers?: Record<string, string> };
/** A route answers with a reply, or (undefined) has answered itself (an event stream). */
type Route = (
  url: URL,
  request: http.IncomingMessage,
  response: http.ServerResponse,
) => Reply | undefined | Promise<Reply | undefined>;

const TEXT = 'text/plain; charset=utf-8';
const JSON_TYPE = 'application/json';

export class HttpEndpoint {
  readonly #options: HttpEndpointOptions;
  readonly #http: http.Server | https.Server;
  readonly #routes: ReadonlyMap<string, Route>;
  readonly #secure: boolean;
  readonly #console: LockConsole;
  #address: { host: string; port: number } | undefined;

  constructor(options: HttpEndpointOptions) {
    this.#options = options;
    const timeout = options.requestTimeoutMs ?? 5_000;
    const handler = (request: http.IncomingMessage, response: http.ServerResponse): void =>
      void this.#handle(request, response);
    this.#secure = options.tls !== undefined;
    // Node checks the request timeouts every connectionsCheckingInterval (default 30 s).
    const bounds = {
      headersTimeout: timeout,
      requestTimeout: timeout,
      keepAliveTimeout: timeout,
      connectionsCheckingInterval: Math.max(50, Math.min(1_000, timeout / 4)),
    };
    this.#http =
      options.tls === undefined
        ? http.createServer(bounds, handler)
        : https.createServer(
            {
              ...bounds,
              ...options.tls,
              minVersion: 'TLSv1.2',
              ...(options.clientCertificates === true ? { requestCert: true, rejectUnauthorized: false } : {}),
            },
            handler,
          );
    this.#http.maxConnections = options.maxConnections ?? 64;
    const lockConsole = (this.#console = new LockConsole({
      server: options.server,
      node: options.node,
      secure: this.#secure,
      port: () => this.#address?.port,
    }));
    this.#routes = new Map<string, Route>([
      ['/healthz', () => text(200, 'ok')],
      ['/readyz', () => this.#readyz()],
      ['/metrics', () => this.#metrics()],
      ['/v1/locks', (url, request) => this.#locks(url, request)],
      ['/v1/auth', (_url, request) => json(200, { authorized: this.#authorized(request) })],
      ['/v1/node', (_url, request) => this.#unauthorized(request) ?? json(200, lockConsole.nodeView())],
      [
        '/v1/locks/events',
        (url, request, response) =>
          this.#unauthorized(request) ?? lockConsole.stream(url, request, response, () => this.#authorized(request)),
      ],
      ...[...lockConsole.assets].map(([path, asset]): [string, Route] => [path, () => asset]),
    ]);
  }

  /** Where it listens, once `listen()` resolved. */
  get address(): { readonly host: string; readonly port: number } | undefined {
    return this.#address;
  }

  get secure(): boolean {
    return this.#secure;
  }

  async listen(): Promise<{ host: string; port: number }> {
    const server = this.#http;
    server.listen({ host: this.#options.host ?? '127.0.0.1', port: this.#options.port ?? 0 });
    await once(server, 'listening');
    const bound = server.address() as AddressInfo;
    this.#address = { host: bound.address, port: bound.port };
    return this.#address;
  }

  /** New connections use this certificate and key (a reload); open ones keep theirs. */
  setTls(options: SecureContextOptions): void {
    if (!(this.#http instanceof https.Server)) throw new Error('this endpoint serves plain HTTP');
    this.#http.setSecureContext({ ...options, minVersion: 'TLSv1.2' });
  }

  /** Stops listening and closes every connection, idle or not. */
  async close(): Promise<void> {
    const server = this.#http;
    await this.#console.close();
    if (!server.listening) return;
    const closed = once(server, 'close');
    server.close();
    server.closeAllConnections();
    await closed;
  }

  async #handle(request: http.IncomingMessage, response: http.ServerResponse): Promise<void> {
    let reply: Reply | undefined;
    try {
      const url = new URL(request.url ?? '/', 'http://endpoint');
      const route = this.#routes.get(url.pathname);
      if (route === undefined) reply = text(404, 'not found');
      else if (request.method !== 'GET' && request.method !== 'HEAD')
        reply = { ...text(405, 'method not allowed'), headers: { allow: 'GET, HEAD' } };
      else reply = await route(url, request, response);
    } catch (error) {
      reply = text(500, `internal error: ${(error as Error).message}`);
    }
    if (reply === undefined) return;
    if (response.headersSent) {
      response.destroy(); // a stream that failed after it started: cut off
      return;
    }
    response.writeHead(reply.status, {
      'content-length': Buffer.byteLength(reply.body),
      'cache-control': 'no-store',
      ...reply.headers,
    });
    response.end(request.method === 'HEAD' ? undefined : reply.body);
  }

  #readyz(): Reply {
    const { ready, reason } = this.#options.server.readiness();
    return ready ? text(200, 'ok') : text(503, `not ready: ${reason ?? 'unknown'}`);
  }

  async #metrics(): Promise<Reply> {
    const { metrics } = this.#options;
    return { status: 200, body: await metrics.metrics(), headers: { 'content-type': metrics.contentType } };
  }

  #authorized(request: http.IncomingMessage): boolean {
    return this.#options.server.authorizes(bearer(request.headers.authorization), certificateName(request));
  }

  /** 401 unless the request's bearer secret is the server's (or it has none). */
  #unauthorized(request: http.IncomingMessage): Reply | undefined {
    return this.#authorized(request) ? undefined : UNAUTHORIZED;
  }

  #locks(url: URL, request: http.IncomingMessage): Reply {
    const server = this.#options.server;
    const readable = server.readableBy(bearer(request.headers.authorization), certificateName(request));
    if (readable === undefined) return UNAUTHORIZED;
    let query;
    try {
      query = lockQuery(url.searchParams);
    } catch (error) {
      return json(400, { error: 'bad_request', detail: (error as Error).message });
    }
    const { ready, reason, leader } = server.readiness();
    if (!ready) return json(503, { error: 'not_ready', reason });
    if (leader !== undefined) return json(503, { error: 'not_leader', leader });
    const locks = server.locks({ ...query, readable }).map((lock) => ({
      key: lock.key,
      kind: lock.kind,
      ...(lock.permits === undefined ? {} : { permits: lock.permits }),
      rev: String(lock.rev),
      owner: lock.owner,
      token: String(lock.token),
      expiresInMs: Math.ceil(lock.expiresInMs),
      holders: holderRows(lock),
      waiters: lock.waiters,
      waitersByMode: lock.waitersByMode,
    }));
    return json(200, locks);
  }
}

/** `host:port` to listen on (an IPv6 host in brackets; port 0 picks a free one). */
export function parseListenAddress(text: string): { host: string; port: number } {
  const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9.-]+)):(\d{1,5})$/.exec(text);
  const port = Number(match?.[3]);
  if (match === null || port > 65535)
    throw new Error(`expected host:port (IPv6 in brackets), got ${JSON.stringify(text)}`);
  return { host: match[1] ?? match[2]!, port };
}

const UNAUTHORIZED: Reply = {
  ...json(401, { error: 'unauthorized' }),
  headers: { 'content-type': JSON_TYPE, 'www-authenticate': 'Bearer' },
};

/** The verified client certificate's subject CN, if the request came with one. */
function certificateName(request: http.IncomingMessage): string | undefined {
  const socket = request.socket as Partial<TLSSocket>;
  if (socket.authorized !== true) return undefined;
  const cn: unknown = socket.getPeerCertificate?.().subject?.CN;
  return typeof cn === 'string' ? cn : undefined;
}

function text(status: number, body: string): Reply {
  return { status, body: `${body}\n`, headers: { 'content-type': TEXT } };
}

function json(status: number, value: unknown): Reply {
  return { status, body: `${JSON.stringify(value)}\n`, headers: { 'content-type': JSON_TYPE } };
}

/** The credentials of `Authorization: Bearer <secret>`, or undefined. */
function bearer(header: string | undefined): string | undefined {
  const match = header === undefined ? null : /^Bearer +(\S+) *$/i.exec(header);
  return match?.[1];
}

/** `prefix` (default empty) and `limit` (1..MAX_LIMIT, default DEFAULT_LOCKS_LIMIT); nothing else. */
function lockQuery(params: URLSearchParams): { prefix: string; limit: number } {
  for (const name of params.keys()) {
    if (name !== 'prefix' && name !== 'limit') throw new Error(`unknown parameter ${JSON.stringify(name)}`);
    if (params.getAll(name).length > 1) throw new Error(`${name} given more than once`);
  }
  const prefix = params.get('prefix') ?? '';
  if (Buffer.byteLength(prefix) > MAX_PREFIX_BYTES) throw new Error(`prefix exceeds ${MAX_PREFIX_BYTES} bytes`);
  const limitText = params.get('limit');
  if (limitText === null) return { prefix, limit: DEFAULT_LOCKS_LIMIT };
  const limit = /^\d{1,6}$/.test(limitText) ? Number(limitText) : NaN;
  if (!(limit >= 1 && limit <= MAX_LIMIT)) throw new Error(`limit must be an integer in 1..${MAX_LIMIT}`);
  return { prefix, limit };
}
