/** Shared pieces of the cluster tests: raw sockets to nodes, a load of clients, and the history
 * checker over everything the clients observed. */
import { expect } from 'vitest';
import { TicketClient } from '../../src/client.js';
import type { IndeterminateError } from '../../src/errors.js';
import { channels } from '../../src/events.js';
import { LineSocket, sleep } from '../helpers.js';

export { LineSocket, sleep };

export function portOf(address: string): number {
  return Number(address.slice(address.lastIndexOf(':') + 1));
}

export async function connect(address: string): Promise<LineSocket> {
  return LineSocket.connect(portOf(address));
}

/** Sends one request on a fresh connection and returns the first reply line that is not `L`. */
export async function ask(address: string, line: string, timeoutMs = 5_000): Promise<string> {
  const socket = await connect(address);
  try {
    socket.write(`${line}\n`);
    for (;;) {
      const reply = await socket.readLine(timeoutMs);
      if (!reply.startsWith('L ')) return reply;
    }
  } finally {
    socket.destroy();
  }
}

/** Retries `line` at `address` until the reply matches, bounded. Returns the reply. */
export async function askUntil(address: string, line: string, accept: RegExp, timeoutMs = 10_000): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < deadline) {
    last = await ask(address, line, 2_000).catch((error: Error) => `(${error.message})`);
    if (accept.test(last)) return last;
    await sleep(50);
  }
  throw new Error(
    `${line} at ${address}: no reply matching ${accept} within ${timeoutMs} ms; last ${JSON.stringify(last)}`,
  );
}

/** A `K` its holder sent for a grant, and what came of it (`pending` until a reply or a close). */
export interface Keep {
  readonly sentAt: number;
  /** The node it was sent to. */
  readonly to: string;
  result: 'pending' | 'kept' | 'gone' | 'indeterminate';
  /** The lease the `K` reply carried. */
  leaseMs?: number;
}

/** One acknowledged grant as a client saw it. */
export interface Grant {
  readonly key: string;
  readonly token: bigint;
  readonly worker: number;
  /** Test clock (performance.now()) when the A arrived. */
  readonly ackAt: number;
  /** When the exact-token R was sent, and its outcome. */
  releaseSentAt?: number;
  released?: 'released' | 'not-held' | 'indeterminate';
  /** The release's answer was lost at least once and the client sent it again (then `not-held` may
   * mean that a lost copy released it). */
  resent?: boolean;
  /** Keeps sent for it, in order. */
  keeps?: Keep[];
  /** Its mode (default `x`) and, for a permit, its slot. */
  mode?: 'x' | 's' | number;
  slot?: number;
}

export interface Load {
  readonly grants: Grant[];
  readonly errors: Map<string, number>;
  stop(): Promise<void>;
}

/**
 * `workers` TicketClients (one each) cycling acquire → hold briefly → release over `keys` keys
 * (`<keyPrefix><n>`, default `load-<n>`), recording every grant. Errors (Indeterminate,
 * not_active, …) are counted, not thrown.
 */
export function startLoad(
  addresses: readonly string[],
  options: {
    workers: number;
    keys: number;
    leaseMs: number;
    holdMs?: number;
    keyPrefix?: string;
    /** Each request's mode (default exclusive), by key and by the worker's cycle number. */
    modeOf?: (key: string, n: number) => 'x' | 's' | number;
  },
): Load {
  const grants: Grant[] = [];
  const errors = new Map<string, number>();
  let running = true;
  const count = (error: unknown): void => {
    const { code = (error as Error).name, reason } = error as { code?: string; reason?: string };
    if (process.env.CLUSTER_TEST_TRACE)
      console.log(performance.now().toFixed(0), code, reason, (error as Error).message);
    errors.set(code, (errors.get(code) ?? 0) + 1);
  };
  // Releases whose answer was lost (the client sends them again), by `key token`.
  const lost = new Set<string>();
  const clients = new Set<unknown>();
  const onIndeterminate = (message: unknown): void => {
    const { client, error } = message as { client: unknown; error: IndeterminateError };
    if (clients.has(client) && error.op === 'release') lost.add(`${error.key} ${error.token}`);
  };
  channels.clientIndeterminate.subscribe(onIndeterminate);
  const loops = Array.from({ length: options.workers }, async (_, worker) => {
    const client = new TicketClient({
      port: portOf(addresses[worker % addresses.length]!),
      addresses: addresses,
      leaseMs: options.leaseMs,
      connectTimeoutMs: 2_000,
      responseTimeoutMs: 2_000,
      errorBackoffMs: { no_leader: 50, not_active: 50 },
      backoff: { initialMs: 20, maxMs: 200 },
    });
    clients.add(client);
    let n = 0;
    try {
      while (running) {
        const key = `${options.keyPrefix ?? 'load-'}${(worker + n++) % options.keys}`;
        const mode = options.modeOf?.(key, n) ?? 'x';
        let result;
        try {
          const modeOptions = mode === 's' ? { shared: true } : mode === 'x' ? {} : { permits: mode };
          result = await client.acquire(key, { waitMs: 200, ...modeOptions });
        } catch (error) {
          count(error);
          await sleep(20);
          continue;
        }
        if (result.status !== 'acquired') continue;
        const grant: Grant = { key, token: result.token, worker, ackAt: performance.now(), mode };
        if (result.slot !== undefined) grant.slot = result.slot;
        grants.push(grant);
        await sleep(options.holdMs ?? 5);
        grant.releaseSentAt = performance.now();
        try {
          grant.released = (await client.release(key, result.token)).status;
        } catch (error) {
          count(error);
          grant.released = 'indeterminate';
        }
        if (lost.has(`${key} ${result.token}`)) grant.resent = true;
      }
    } finally {
      client.destroy();
    }
  });
  return {
    grants,
    errors,
    async stop() {
      running = false;
      await Promise.all(loops);
      channels.clientIndeterminate.unsubscribe(onIndeterminate);
    },
  };
}

/**
 * The history checker: per key, tokens are unique and grants in token order never overlap: a
 * grant is acknowledged only after the previous holder's release was sent, or, without a
 * release, after its validity ended: its lease counted from its acknowledgement, or from the send
 * time of any `K` answered `K` (a `K` reply with lease L extends the holder's validity to the K's
 * send time + L, however late the reply came), whichever is later. So no key was held by two
 * clients at once, and tokens rise in the order grants were made.
 */
export function checkHistory(grants: readonly Grant[], leaseMs: number): void {
  const byKey = new Map<string, Grant[]>();
  for (const grant of grants) {
    let list = byKey.get(grant.key);
    if (list === undefined) byKey.set(grant.key, (list = []));
    list.push(grant);
  }
  for (const [key, list] of byKey) {
    list.sort((a, b) => (a.token < b.token ? -1 : a.token > b.token ? 1 : 0));
    for (let i = 1; i < list.length; i++) {
      const previous = list[i - 1]!;
      const next = list[i]!;
      expect(next.token, `${key}: token ${next.token} issued twice`).not.toBe(previous.token);
      // Released (R acknowledged, a release whose outcome is unknown, or N to a re-sent release,
      // which a lost copy may have done): the next grant came after the R was sent. Otherwise only
      // the lease's end frees the key.
      const freedAt = freedAtOf(previous, leaseMs);
      expect(
        next.ackAt,
        `${key}: token ${next.token} acknowledged at ${next.ackAt.toFixed(1)} while token ${previous.token} was held until ${freedAt.toFixed(1)}` +
          ` (acknowledged at ${previous.ackAt.toFixed(1)}, kept by K sent at ${JSON.stringify(kept(previous).map((k) => Math.round(k.sentAt)))})`,
      ).toBeGreaterThanOrEqual(freedAt - 1);
    }
  }
}

/** When a grant stopped counting: when its release was sent (R acknowledged, a release whose
 * outcome is unknown, or N to a re-sent release, which a lost copy may have done), else the end
 * of its validity. */
function freedAtOf(grant: Grant, leaseMs: number): number {
  return grant.released === 'released' ||
    grant.released === 'indeterminate' ||
    (grant.released === 'not-held' && grant.resent === true)
    ? grant.releaseSentAt!
    : validUntil(grant, leaseMs);
}

/**
 * The history checker for modes, by the same reading of time as `checkHistory` (a grant counts
 * from its acknowledgement until `freedAtOf`; a later grant must be acknowledged after what it
 * must not overlap was freed). Per key, in token order: tokens are unique; a semaphore key never
 * has more than its N grants at once and never two on one slot (each slot's tokens rise); on a
 * lock key no grant overlaps an exclusive one (shared ones may overlap each other).
 */
export function checkModeHistory(grants: readonly Grant[], leaseMs: number): void {
  const byKey = new Map<string, Grant[]>();
  for (const grant of grants) byKey.set(grant.key, [...(byKey.get(grant.key) ?? []), grant]);
  for (const [key, list] of byKey) {
    list.sort((a, b) => (a.token < b.token ? -1 : a.token > b.token ? 1 : 0));
    const seen: Grant[] = [];
    for (const next of list) {
      const at = next.ackAt + 1;
      const what = `${key}: token ${next.token} (${String(next.mode ?? 'x')}) acknowledged at ${next.ackAt.toFixed(1)}`;
      expect(seen.at(-1)?.token, `${key}: token ${next.token} issued twice`).not.toBe(next.token);
      // The earlier grants still counting when this one was acknowledged.
      const live = seen.filter((g) => freedAtOf(g, leaseMs) > at);
      const mode = next.mode ?? 'x';
      if (typeof mode === 'number') {
        expect(live.length, `${what}: ${live.length} of ${mode} permits still held`).toBeLessThan(mode);
        const sameSlot = live.filter((g) => g.slot === next.slot);
        expect(
          sameSlot.map((g) => g.token),
          `${what}: slot ${next.slot} still held`,
        ).toEqual([]);
        expect(next.slot, `${what}: slot out of range`).toBeLessThan(mode);
      } else {
        const clashing = live.filter((g) => mode === 'x' || (g.mode ?? 'x') === 'x');
        expect(
          clashing.map((g) => `${g.token} ${String(g.mode ?? 'x')}`),
          `${what}: overlaps`,
        ).toEqual([]);
      }
      seen.push(next);
    }
  }
}

function kept(grant: Grant): Keep[] {
  return (grant.keeps ?? []).filter((k) => k.result === 'kept');
}

/** Grants whose release found nothing to release although no copy of it was lost: lost grants. */
export function lostGrants(grants: readonly Grant[]): Grant[] {
  return grants.filter((g) => g.released === 'not-held' && g.resent !== true);
}

/** Until when a holder that did not release may count on its grant. */
function validUntil(grant: Grant, leaseMs: number): number {
  return Math.max(grant.ackAt + leaseMs, ...kept(grant).map((k) => k.sentAt + k.leaseMs!));
}
