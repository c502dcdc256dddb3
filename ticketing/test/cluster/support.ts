/** Shared pieces of the cluster tests: raw sockets to nodes, a load of clients, the history
 * checker over everything the clients observed, and the observation checker over what observers
 * were shown. */
import { expect } from 'vitest';
import { TicketClient } from '../../src/client.js';
import { IndeterminateError } from '../../src/errors.js';
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
  /** The owner its acquire named. */
  owner?: string;
  /** When the release's `R` reply (released) arrived. */
  releasedAt?: number;
  /** Values its holder published, in order (`whileHeld`). */
  publishes?: Publish[];
}

/** A `P` a holder sent, and what came of it (`pending` until a reply or a close). */
export interface Publish {
  readonly value: string;
  readonly sentAt: number;
  result: 'pending' | 'published' | 'refused' | 'indeterminate';
}

export interface Load {
  readonly grants: Grant[];
  readonly errors: Map<string, number>;
  /** Every error counted in `errors`, with when it came (performance.now()). */
  readonly failures: Array<{ readonly code: string; readonly at: number; readonly cause?: string }>;
  /** `<key> <owner>` of every acquire whose outcome is unknown (Indeterminate): it may hold. */
  readonly uncertain: Set<string>;
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
    /** What a worker does while it holds a grant (default: sleeps `holdMs`). */
    whileHeld?: (grant: Grant) => Promise<void>;
  },
): Load {
  const grants: Grant[] = [];
  const errors = new Map<string, number>();
  const failures: Array<{ code: string; at: number; cause?: string }> = [];
  const uncertain = new Set<string>();
  let running = true;
  const count = (error: unknown): void => {
    const { code = (error as Error).name, reason } = error as { code?: string; reason?: string };
    if (process.env.CLUSTER_TEST_TRACE)
      console.log(performance.now().toFixed(0), code, reason, (error as Error).message);
    errors.set(code, (errors.get(code) ?? 0) + 1);
    const { cause } = error as { cause?: { serverCode?: string; code?: string; message?: string } };
    failures.push({ code, at: performance.now(), cause: cause?.serverCode ?? cause?.code ?? cause?.message });
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
          if (error instanceof IndeterminateError) uncertain.add(`${key} ${error.owner}`);
          await sleep(20);
          continue;
        }
        if (result.status !== 'acquired') continue;
        const { token, owner } = result;
        const grant: Grant = { key, token, worker, ackAt: performance.now(), mode, owner };
        if (result.slot !== undefined) grant.slot = result.slot;
        grants.push(grant);
        await (options.whileHeld?.(grant) ?? sleep(options.holdMs ?? 5));
        grant.releaseSentAt = performance.now();
        try {
          grant.released = (await client.release(key, token)).status;
          if (grant.released === 'released') grant.releasedAt = performance.now();
        } catch (error) {
          count(error);
          grant.released = 'indeterminate';
        }
        if (lost.has(`${key} ${token}`)) grant.resent = true;
      }
    } finally {
      client.destroy();
    }
  });
  return {
    grants,
    errors,
    failures,
    uncertain,
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

/** One `V` an observer received (election.test.ts). */
export interface Observation {
  /** Which observer: its streams run on across its reconnects. */
  readonly observer: number;
  readonly key: string;
  readonly rev: bigint;
  /** The holder it showed; undefined: vacant. */
  readonly holder: { readonly token: bigint; readonly owner: string; readonly value: string | undefined } | undefined;
  /** Test clock when it arrived. */
  readonly at: number;
  /** Test clock when the `O` of its connection was sent: what it shows was true at some moment
   * in [since, at]. */
  readonly since: number;
}

/**
 * The observation checker, over the `V`s observers received (each observer's in arrival order)
 * and the grants of the load that ran meanwhile (`startLoad`, exclusive keys only), with the
 * acquires whose outcome is unknown (`Load.uncertain`). Per observer and key, across its
 * reconnects (one stream):
 * (a) revs never fall; one rev of a key names one state, for every observer and every leader.
 * (b) Only committed states: a holder shown is an acknowledged grant of the key with its token
 *     and owner, or an acquire by that owner whose outcome was unknown (then with no value: its
 *     holder never learned its token, so never published); a value shown was sent in a `P` under
 *     that token before it arrived; a vacancy was possible: some moment in [since, at] lies
 *     outside every acknowledged grant's time (from its acknowledgement until `freedAtOf`, as
 *     `checkHistory` reads time), 1 ms given at each end.
 * (c) Never stale: a holder shown is not one whose release was acknowledged before the
 *     observation began; once a stream moved off a holder (to a vacancy or another holder), it
 *     never shows that holder or an older token again (exclusive tokens rise grant by grant); and
 *     while one holder stays, its values only move forward in the order they were published.
 */
export function checkObservations(
  observations: readonly Observation[],
  grants: readonly Grant[],
  uncertain: ReadonlySet<string>,
  leaseMs: number,
): void {
  const grantOf = new Map<string, Grant>();
  const grantsOf = new Map<string, Grant[]>();
  for (const grant of grants) {
    grantOf.set(`${grant.key} ${grant.token}`, grant);
    grantsOf.set(grant.key, [...(grantsOf.get(grant.key) ?? []), grant]);
  }
  const stateAt = new Map<string, string>();
  const previousOf = new Map<string, Observation>();
  const highestOf = new Map<string, bigint>();
  for (const o of observations) {
    const stream = `${o.observer} ${o.key}`;
    const { holder } = o;
    const shown = holder === undefined ? '-' : `${holder.token} ${holder.owner} ${holder.value ?? ''}`;
    const what = `observer ${o.observer}: V ${o.key} ${o.rev} ${shown} at ${o.at.toFixed(1)}`;
    // (a)
    const previous = previousOf.get(stream);
    previousOf.set(stream, o);
    expect(o.rev >= (previous?.rev ?? 0n), `${what}: rev fell from ${previous?.rev}`).toBe(true);
    const named = stateAt.get(`${o.key} ${o.rev}`);
    expect(named ?? shown, `${what}: rev ${o.rev} also named another state`).toBe(shown);
    stateAt.set(`${o.key} ${o.rev}`, shown);
    // (b)
    if (holder === undefined) {
      const vacant = vacantMoment(grantsOf.get(o.key) ?? [], o.since, o.at, leaseMs);
      expect(vacant, `${what}: vacant, but grants were held throughout since ${o.since.toFixed(1)}`).toBe(true);
      continue;
    }
    const grant = grantOf.get(`${o.key} ${holder.token}`);
    if (grant === undefined) {
      const unknown = uncertain.has(`${o.key} ${holder.owner}`);
      expect(unknown, `${what}: a holder no acquire could have made`).toBe(true);
      expect(holder.value, `${what}: a value for a grant its holder never learned of`).toBeUndefined();
    } else {
      expect(holder.owner, `${what}: the grant's owner`).toBe(grant.owner);
      const published = (grant.publishes ?? []).findIndex((p) => p.value === holder.value && p.sentAt <= o.at);
      if (holder.value !== undefined) expect(published, `${what}: a value never published`).toBeGreaterThanOrEqual(0);
      // (c)
      if (grant.releasedAt !== undefined) {
        expect(o.since, `${what}: released (acknowledged at ${grant.releasedAt.toFixed(1)})`).toBeLessThan(
          grant.releasedAt,
        );
      }
      const before = previous?.holder;
      if (before?.token === holder.token && before.value !== undefined) {
        const order = (grant.publishes ?? []).findIndex((p) => p.value === before.value);
        expect(published, `${what}: the value went back from ${before.value}`).toBeGreaterThanOrEqual(order);
      }
    }
    const highest = highestOf.get(stream) ?? 0n;
    if (previous?.holder?.token !== holder.token) {
      expect(holder.token > highest, `${what}: a holder after the stream showed token ${highest}`).toBe(true);
    }
    if (holder.token > highest) highestOf.set(stream, holder.token);
  }
}

/** Whether some moment in [from, to] lies outside every grant's time (1 ms given at each end). */
function vacantMoment(grants: readonly Grant[], from: number, to: number, leaseMs: number): boolean {
  const spans = grants
    .map((g) => [g.ackAt + 1, freedAtOf(g, leaseMs) - 1] as const)
    .filter(([start, end]) => start < end && end > from && start < to)
    .sort((a, b) => a[0] - b[0]);
  let covered = from;
  for (const [start, end] of spans) {
    if (start > covered) return true;
    covered = Math.max(covered, end);
    if (covered >= to) return false;
  }
  return covered < to;
}
