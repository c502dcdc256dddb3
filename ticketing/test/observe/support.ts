/** Shared pieces of the observability tests: an in-process server with its metrics, and reading
 * samples out of a Prometheus text scrape. */
import { TicketMetrics } from '../../src/observe/metrics.js';
import { TicketServer, type TicketServerOptions } from '../../src/server.js';

export interface Observed {
  readonly server: TicketServer;
  readonly metrics: TicketMetrics;
  /** The lock server's port. */
  readonly port: number;
  /** The metrics text, as `GET /metrics` serves it. */
  scrape(): Promise<string>;
  close(): Promise<void>;
}

/** A TicketServer on a free loopback port, and its metrics. */
export async function startObserved(options: TicketServerOptions = {}): Promise<Observed> {
  const server = new TicketServer({ port: 0, ...options });
  const metrics = new TicketMetrics({ server });
  const { port } = await server.listen();
  return {
    server,
    metrics,
    port,
    scrape: () => metrics.metrics(),
    close: async () => {
      await server.close();
      metrics.close();
    },
  };
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
