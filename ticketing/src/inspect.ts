/**
 * `ticketing inspect`: asks a server's HTTP endpoint (`GET /v1/locks`) which keys are held, and
 * prints them as a table (escaped as `flocklease inspect` does) or, with `--json`, the endpoint's
 * array as it came.
 */
import http from 'node:http';
import https from 'node:https';
import { displayText, relative, table } from '#kernel';
import { isPlainTextPeer, speaksTls } from './tls-sniff.js';

export interface InspectRequest {
  /** The endpoint's `host:port` (IPv6 in brackets). */
  readonly address: string;
  /** Sent as `Authorization: Bearer <secret>`. */
  readonly secret?: string | undefined;
  /** Ask over HTTPS, trusting this CA (PEM), or (`'system'`) the CAs Node trusts by default. */
  readonly ca?: Buffer | 'system' | undefined;
  readonly prefix?: string | undefined;
  readonly limit?: number | undefined;
  /** The whole exchange, ms. */
  readonly timeoutMs: number;
}

/** One row of `GET /v1/locks` (docs/ticketing-operations.md). The mode fields are absent from a
 * server that predates them: such a row is one exclusive holder. */
export interface LockRow {
  readonly key: string;
  readonly kind?: 'lock' | 'semaphore';
  readonly permits?: number;
  readonly owner: string;
  readonly token: string;
  readonly expiresInMs: number;
  readonly holders?: ReadonlyArray<{
    readonly owner: string;
    readonly token: string;
    readonly mode: 'x' | 's' | 'permit';
    readonly slot?: number;
    readonly expiresInMs: number;
  }>;
  readonly waiters: number;
  readonly waitersByMode?: Readonly<Record<string, number>>;
}

/** The endpoint's answer: its body, parsed, or why there is none (a sentence for stderr). */
export type InspectResult =
  | { readonly ok: true; readonly rows: LockRow[]; readonly body: string }
  | {
      readonly ok: false;
      readonly why: string;
    };

/** The endpoint's reply is at most this large (10 000 rows of the longest keys and owners fit). */
const MAX_BODY_BYTES = 16 * 1024 * 1024;

export async function fetchLocks(request: InspectRequest): Promise<InspectResult> {
  const colon = request.address.lastIndexOf(':');
  const hostname = request.address.slice(0, colon).replace(/^\[(.*)\]$/, '$1');
  const port = Number(request.address.slice(colon + 1));
  const query = new URLSearchParams();
  if (request.prefix !== undefined) query.set('prefix', request.prefix);
  if (request.limit !== undefined) query.set('limit', String(request.limit));
  const path = `/v1/locks${query.size > 0 ? `?${query.toString()}` : ''}`;
  const headers: Record<string, string> = { accept: 'application/json' };
  if (request.secret !== undefined) headers.authorization = `Bearer ${request.secret}`;
  const scheme = request.ca === undefined ? 'http' : 'https';
  let status: number;
  let body: string;
  try {
    ({ status, body } = await get(request, { hostname, port, path, headers }));
  } catch (error) {
    return {
      ok: false,
      why: `${scheme}://${request.address}: ${await describeFailure(error, request, hostname, port)}`,
    };
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return { ok: false, why: `${scheme}://${request.address}${path}: HTTP ${status}, not JSON` };
  }
  if (status === 200 && Array.isArray(parsed) && parsed.every(isLockRow)) return { ok: true, rows: parsed, body };
  return { ok: false, why: refusal(status, parsed) };
}

/** The rows as a table for a terminal; every key and owner escaped. */
export function locksText(rows: readonly LockRow[], prefix: string | undefined, limit: number): string {
  if (rows.length === 0)
    return prefix === undefined || prefix === ''
      ? 'No locks held.\n'
      : `No locks held under "${displayText(prefix)}".\n`;
  // One line per holder: the key, its kind and its waiters on the first.
  const cells = rows.flatMap((row) => {
    const holders = row.holders ?? [{ owner: row.owner, token: row.token, mode: 'x', expiresInMs: row.expiresInMs }];
    const kind = row.kind === 'semaphore' ? `${row.permits} permits` : 'lock';
    const byMode = Object.entries(row.waitersByMode ?? {}).map(([mode, n]) => `${n} ${mode}`);
    const waiters = byMode.length > 0 ? `${row.waiters} (${byMode.join(', ')})` : String(row.waiters);
    return holders.map((holder, i) => [
      i === 0 ? displayText(row.key) : '',
      i === 0 ? kind : '',
      holder.mode === 'permit' ? `slot ${holder.slot}` : holder.mode,
      displayText(holder.owner),
      holder.token,
      relative(holder.expiresInMs, 0),
      i === 0 ? waiters : '',
    ]);
  });
  const more = rows.length >= limit ? `\n(the first ${limit}: --limit shows more)` : '';
  return `${table(['KEY', 'KIND', 'MODE', 'OWNER', 'TOKEN', 'EXPIRES', 'WAITERS'], cells)}${more}\n`;
}

function get(request: InspectRequest, options: http.RequestOptions): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const client =
      request.ca === undefined
        ? http.request(options)
        : https.request({
            ...options,
            ...(request.ca === 'system' ? {} : { ca: request.ca }),
            minVersion: 'TLSv1.2',
          });
    const timer = setTimeout(
      () => client.destroy(new Error(`no answer within ${request.timeoutMs} ms`)),
      request.timeoutMs,
    );
    client.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    client.on('response', (response) => {
      response.on('error', (error) => {
        clearTimeout(timer);
        reject(error);
      });
      const chunks: Buffer[] = [];
      let size = 0;
      response.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > MAX_BODY_BYTES) client.destroy(new Error(`the answer exceeds ${MAX_BODY_BYTES} bytes`));
        else chunks.push(chunk);
      });
      response.on('end', () => {
        clearTimeout(timer);
        resolve({ status: response.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') });
      });
    });
    client.end();
  });
}

/** A failed exchange in a sentence; a TLS mismatch (which a plain request meets as a hang-up)
 * says which flag to change. */
async function describeFailure(error: unknown, request: InspectRequest, host: string, port: number): Promise<string> {
  const message = (error as Error).message;
  if (request.ca !== undefined)
    return isPlainTextPeer(error) ? 'the endpoint speaks plain HTTP, not HTTPS: drop --tls-ca' : message;
  const code = (error as NodeJS.ErrnoException).code;
  if ((code === 'ECONNRESET' || code === 'EPIPE') && (await speaksTls(host, port)))
    return 'the endpoint speaks HTTPS: pass --tls-ca <the CA certificate file> (or --tls-ca system)';
  return message;
}

/** Why the endpoint refused, in a sentence. */
function refusal(status: number, body: unknown): string {
  const fields = typeof body === 'object' && body !== null ? (body as Record<string, unknown>) : {};
  switch (status) {
    case 401:
      return 'the server wants its secret: --secret-file <file> (or the secret given is not the one)';
    case 503:
      return fields.error === 'not_leader'
        ? `this node is a follower; the leader is ${String(fields.leader)} (its clients' address: inspect its HTTP endpoint)`
        : `this node is not serving: ${String(fields.reason)}`;
    case 400:
      return `bad request: ${String(fields.detail)}`;
    default:
      return `unexpected answer: HTTP ${status} ${JSON.stringify(body).slice(0, 200)}`;
  }
}

function isLockRow(value: unknown): value is LockRow {
  if (typeof value !== 'object' || value === null) return false;
  const row = value as Record<string, unknown>;
  return (
    typeof row.key === 'string' &&
    typeof row.owner === 'string' &&
    typeof row.token === 'string' &&
    typeof row.expiresInMs === 'number' &&
    typeof row.waiters === 'number'
  );
}
