/**
 * A workload of holders that keep their grants alive with `K`, on raw sockets (the wire, not a
 * client library): each worker acquires a key (`A`, wait 0), keeps it with a `K` every third of
 * the lease while it holds it (1–2.5 leases), then releases it. Every reply any connection ever
 * receives is recorded, including replies that arrive after the worker gave up on the connection
 * (a paused leader that answers after it resumes): a late `A` is a grant, a late `K` extends its
 * grant's validity, and the history checker (support.ts) judges them all alike.
 *
 * A worker follows `M` to the leader, moves to the next node on `E` or a closed connection, and
 * abandons a connection that leaves an acquire unanswered for 2 s. A holder treats the grant as
 * lost once its own deadline passes (the latest confirmed send time + the lease, or a `G`): it
 * stops keeping it and does not release it (a release after the deadline proves nothing).
 */
import net from 'node:net';
import { sleep, portOf, type Grant, type Keep } from './support.js';

export interface KeeperLoad {
  readonly grants: Grant[];
  /** Replies by kind (`K`, `G`, `T`, `M`, `E …`, …) and events (`lost`, `abandoned`), for the figures. */
  readonly counts: Map<string, number>;
  stop(): Promise<void>;
}

interface PendingAcquire {
  readonly key: string;
  readonly sentAt: number;
  settle?: (line: string | undefined) => void;
}

/** One connection and everything sent on it that may still be answered. */
class Link {
  readonly socket: net.Socket;
  closed = false;
  /** The `M` it answered, if any. */
  moved: string | undefined;
  readonly #acquires = new Map<string, PendingAcquire>();
  readonly #keeps = new Map<string, Keep[]>();
  readonly #releases = new Map<string, { grant: Grant; settle: (ok: boolean | undefined) => void }>();
  #tail = '';
  readonly #onClose: Array<() => void> = [];

  constructor(
    readonly address: string,
    readonly worker: number,
    readonly load: { grants: Grant[]; count: (what: string) => void },
  ) {
    this.socket = net.connect(portOf(address), '127.0.0.1');
    this.socket.setNoDelay(true);
    this.socket.on('error', () => {});
    this.socket.on('data', (chunk: Buffer) => {
      const lines = (this.#tail + chunk.toString('latin1')).split('\n');
      this.#tail = lines.pop()!;
      for (const line of lines) this.#line(line);
    });
    this.socket.on('close', () => {
      this.closed = true;
      for (const keeps of this.#keeps.values())
        for (const keep of keeps) if (keep.result === 'pending') keep.result = 'indeterminate';
      this.#keeps.clear();
      for (const pending of this.#acquires.values()) pending.settle?.(undefined);
      for (const { settle } of this.#releases.values()) settle(undefined);
      for (const wake of this.#onClose.splice(0)) wake();
    });
  }

  acquire(key: string, owner: string, timeoutMs: number): Promise<string | undefined> {
    const pending: PendingAcquire = { key, sentAt: performance.now() };
    this.#acquires.set(owner, pending);
    this.socket.write(`A ${key} ${owner} 0\n`);
    return new Promise((resolve) => {
      const timer = setTimeout(() => settle(undefined), timeoutMs);
      const settle = (line: string | undefined): void => {
        clearTimeout(timer);
        pending.settle = undefined;
        resolve(line);
      };
      pending.settle = settle;
    });
  }

  keep(grant: Grant): Keep {
    const keep: Keep = { sentAt: performance.now(), to: this.address, result: 'pending' };
    (grant.keeps ??= []).push(keep);
    const id = String(grant.token);
    let list = this.#keeps.get(id);
    if (list === undefined) this.#keeps.set(id, (list = []));
    list.push(keep);
    this.socket.write(`K ${grant.key} ${grant.token}\n`);
    return keep;
  }

  release(grant: Grant, timeoutMs: number): Promise<boolean | undefined> {
    grant.releaseSentAt = performance.now();
    this.socket.write(`R ${grant.key} ${grant.token}\n`);
    return new Promise((resolve) => {
      const timer = setTimeout(() => settle(undefined), timeoutMs);
      const settle = (ok: boolean | undefined): void => {
        clearTimeout(timer);
        this.#releases.delete(String(grant.token));
        resolve(ok);
      };
      this.#releases.set(String(grant.token), { grant, settle });
    });
  }

  whenClosed(): Promise<void> {
    return this.closed ? Promise.resolve() : new Promise((resolve) => this.#onClose.push(resolve));
  }

  #line(line: string): void {
    const fields = line.split(' ');
    const op = fields[0]!;
    this.load.count(op === 'E' ? `E ${fields[1]}` : op);
    switch (op) {
      case 'A':
      case 'T':
      case 'B': {
        const owner = op === 'A' ? fields[2]! : fields[1]!;
        const pending = this.#acquires.get(owner);
        this.#acquires.delete(owner);
        if (pending === undefined) {
          this.load.count('unmatched');
        } else if (pending.settle !== undefined) {
          pending.settle(line);
        } else if (op === 'A') {
          // A grant for an acquire this worker gave up on: a holder it never knew of. Recorded
          // (the checker must see it) and handed back at once.
          this.load.count('late A');
          const grant: Grant = {
            key: pending.key,
            token: BigInt(fields[1]!),
            worker: this.worker,
            ackAt: performance.now(),
          };
          this.load.grants.push(grant);
          grant.released = 'indeterminate';
          void this.release(grant, 2_000);
        }
        return;
      }
      case 'K':
      case 'G': {
        const keep = this.#keeps.get(fields[1]!)?.shift();
        if (keep === undefined) {
          this.load.count('unmatched');
          return;
        }
        keep.result = op === 'K' ? 'kept' : 'gone';
        if (op === 'K') keep.leaseMs = Number(fields[3]);
        return;
      }
      case 'R':
      case 'N':
        this.#releases.get(fields[1]!)?.settle(op === 'R');
        return;
      case 'M':
        this.moved = fields[1];
        return;
      default:
        return; // L, E: the close follows
    }
  }
}

/** `workers` holders over `keys` keys (`keep-0` …), as described above. */
export function startKeepers(
  addresses: readonly string[],
  options: { workers: number; keys: number; leaseMs: number },
): KeeperLoad {
  const grants: Grant[] = [];
  const counts = new Map<string, number>();
  const count = (what: string): void => void counts.set(what, (counts.get(what) ?? 0) + 1);
  const links: Link[] = [];
  let running = true;
  const { leaseMs } = options;

  const worker = async (id: number): Promise<void> => {
    let next = id;
    let address = addresses[id % addresses.length]!;
    let link: Link | undefined;
    let seq = 0;
    let rand = id * 7919 + 1;
    const random = (): number => (rand = (Math.imul(rand, 1103515245) + 12345) >>> 0) / 2 ** 32;
    const connectTo = (to: string): Link => {
      address = to;
      link = new Link(to, id, { grants, count });
      links.push(link);
      return link;
    };
    /** The live link, or a new one: to the node an `M` named, else to the next node. */
    const current = (): Link => {
      if (link === undefined) return connectTo(address);
      if (!link.closed) return link;
      const moved = link.moved;
      return connectTo(
        moved !== undefined && addresses.includes(moved) ? moved : addresses[++next % addresses.length]!,
      );
    };

    while (running) {
      const key = `keep-${Math.floor(random() * options.keys)}`;
      const l = current();
      const aSentAt = performance.now();
      const reply = await l.acquire(key, `w${id}-${seq++}`, 2_000);
      if (reply === undefined) {
        if (!l.closed) {
          // No answer in 2 s (a paused node): leave the connection open, it may still answer.
          count('abandoned');
          connectTo(addresses[++next % addresses.length]!);
        }
        await sleep(50);
        continue;
      }
      if (!reply.startsWith('A ')) {
        await sleep(reply.startsWith('T ') ? 20 + random() * 40 : 50);
        continue;
      }
      const keeps: Keep[] = [];
      const grant: Grant = { key, token: BigInt(reply.split(' ')[1]!), worker: id, ackAt: performance.now(), keeps };
      grants.push(grant);
      // The holder's own deadline: the send time of what granted or last kept it, plus the lease.
      const deadline = (): number =>
        Math.max(aSentAt + leaseMs, ...keeps.filter((k) => k.result === 'kept').map((k) => k.sentAt + k.leaseMs!));
      const holdUntil = grant.ackAt + leaseMs * (1 + 1.5 * random());
      let lastKeepAt = grant.ackAt;
      let lost = false;
      while (running && performance.now() < holdUntil) {
        await sleep(50);
        const now = performance.now();
        if (now >= deadline() || keeps.some((k) => k.result === 'gone')) {
          lost = true;
          break;
        }
        // Every third of the lease; at once again after a keep whose connection closed.
        const retry = keeps.at(-1)?.result === 'indeterminate' && now - lastKeepAt >= 100;
        if (now - lastKeepAt >= leaseMs / 3 || retry) {
          current().keep(grant);
          lastKeepAt = now;
        }
      }
      if (lost || performance.now() >= deadline()) {
        count('lost');
        continue;
      }
      const released = await current().release(grant, 2_000);
      grant.released = released === undefined ? 'indeterminate' : released ? 'released' : 'not-held';
    }
  };

  const loops = Array.from({ length: options.workers }, (_, id) => worker(id));
  return {
    grants,
    counts,
    async stop() {
      running = false;
      await Promise.all(loops);
      for (const l of links) l.socket.destroy();
    },
  };
}
