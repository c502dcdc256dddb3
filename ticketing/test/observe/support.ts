/** Shared pieces of the observability tests: an in-process server with its metrics and HTTP
 * endpoint, HTTP(S) requests, and reading samples out of a Prometheus text scrape. */
import http from 'node:http';
import https from 'node:https';
import { HttpEndpoint, type HttpEndpointOptions } from '../../src/observe/http.js';
import { TicketMetrics } from '../../src/observe/metrics.js';
import { TicketServer, type TicketServerOptions } from '../../src/server/server.js';

export interface Observed {
  readonly server: TicketServer;
  readonly metrics: TicketMetrics;
  readonly endpoint: HttpEndpoint;
  /** The lock server's port. */
  readonly port: number;
  /** The endpoint's port. */
  readonly httpPort: number;
  /** `GET /metrics`. */
  scrape(): Promise<string>;
  close(): Promise<void>;
}

/** A TicketServer on a free loopback port, its metrics, and its endpoint on another port. */
export async function startObserved(
  options: TicketServerOptions = {},
  endpointOptions: Partial<HttpEndpointOptions> = {},
): Promise<Observed> {
  const server = new TicketServer({ port: 0, ...options });
  const metrics = new TicketMetrics({ server });
  const endpoint = new HttpEndpoint({ server, metrics, ...endpointOptions });
  const { port } = await server.listen();
  const { port: httpPort } = await endpoint.listen();
  return {
    server,
    metrics,
    endpoint,
    port,
    httpPort,
    scrape: async () => {
      const answer = await request(httpPort, '/metrics');
      if (answer.status !== 200) throw new Error(`/metrics: HTTP ${answer.status}`);
      return answer.body;
    },
    close: async () => {
      await server.close();
      await endpoint.close();
      metrics.close();
    },
  };
}

export interface Answer {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: string;
}

/** One HTTP request to 127.0.0.1 (HTTPS with `ca`), bounded by `timeoutMs`. */
export function request(
  port: number,
  path: string,
  options: { method?: string; headers?: Record<string, string>; ca?: Buffer; timeoutMs?: number } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const params = { host: '127.0.0.1', port, path, method: options.method ?? 'GET', headers: options.headers };
    const req =
      options.ca === undefined
        ? http.request(params)
        : https.request({ ...params, ca: options.ca, servername: 'localhost' });
    req.setTimeout(options.timeoutMs ?? 5_000, () => req.destroy(new Error(`${path}: no answer in time`)));
    req.on('error', reject);
    req.on('response', (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (body += chunk));
      response.on('end', () => resolve({ status: response.statusCode!, headers: response.headers, body }));
      response.on('error', reject);
    });
    req.end();
  });
}

/** The value of one sample in a Prometheus text scrape (`undefined`: absent). Labels must match
 * exactly the ones given (in any order). */
export function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (match === null || match[1] !== name) continue;
    const found: Record<string, string> = {};
    for (const [, key, value] of (match[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
      found[key!] = value!;
    const wanted = Object.entries(labels);
    if (Object.keys(found).length === wanted.length && wanted.every(([k, v]) => found[k] === v))
      return Number(match[3]);
  }
  return undefined;
}
