/** Raw-socket election clients for the cluster tests (election.test.ts): each finds the leader by
 * itself (the `W` probe, following `M`), as a client must after a failover. An observer re-observes
 * on the leader after every close; a publisher sends one `P` at a time. Lines are read as they come
 * and not kept (an observer under load gets thousands). */
import net from 'node:net';
import { electionReply } from '../../src/election-wire.js';
import { portOf, sleep, type Grant, type Observation, type Publish } from './support.js';

/** A socket read line by line: `next` waits (bounded) for the next line, undefined once closed. */
class Lines {
  readonly socket: net.Socket;
  closed = false;
  readonly closedPromise: Promise<void>;
  #rest = '';
  readonly #queue: string[] = [];
  #wake: (() => void) | undefined;
  /** Set: every line goes here instead. */
  onLine: ((line: string) => void) | undefined;

  constructor(socket: net.Socket) {
    this.socket = socket;
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => {
      const parts = (this.#rest + chunk).split('\n');
      this.#rest = parts.pop()!;
      for (const line of parts) {
        if (this.onLine !== undefined) this.onLine(line);
        else this.#queue.push(line);
      }
      this.#wake?.();
    });
    socket.on('error', () => {});
    this.closedPromise = new Promise((resolve) =>
      socket.on('close', () => {
        this.closed = true;
        this.#wake?.();
        resolve();
      }),
    );
  }

  static connect(address: string, timeoutMs: number): Promise<Lines | undefined> {
    return new Promise((resolve) => {
      const socket = net.connect(portOf(address), address.slice(0, address.lastIndexOf(':')));
      const lines = new Lines(socket);
      const timer = setTimeout(() => done(undefined), timeoutMs);
      const done = (result: Lines | undefined): void => {
        clearTimeout(timer);
        if (result === undefined) socket.destroy();
        resolve(result);
      };
      socket.once('connect', () => done(lines));
      socket.once('close', () => done(undefined));
    });
  }

  /** The next line that is not a leader hint (`L`); undefined when closed or after `timeoutMs`. */
  async next(timeoutMs: number): Promise<string | undefined> {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const line = this.#queue.shift();
      if (line !== undefined) {
        if (line.startsWith('L ')) continue;
        return line;
      }
      const left = deadline - performance.now();
      if (this.closed || left <= 0) return undefined;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.#wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.#wake = undefined;
    }
  }

  destroy(): void {
    this.socket.destroy();
  }
}

/** A connection to the node that answers the `W` probe itself (the serving leader), found by
 * asking `addresses` in turn and following `M`; undefined after `timeoutMs` or once `stopped()`. */
async function leaderConnection(
  addresses: readonly string[],
  timeoutMs: number,
  stopped: () => boolean = () => false,
): Promise<{ lines: Lines; address: string } | undefined> {
  const deadline = performance.now() + timeoutMs;
  let hint: string | undefined;
  for (let round = 0; performance.now() < deadline && !stopped(); round++) {
    const address = hint ?? addresses[round % addresses.length]!;
    hint = undefined;
    // A paused node accepts the connection and never answers: 1 s each.
    const lines = await Lines.connect(address, 1_000);
    if (lines !== undefined) {
      lines.socket.write('W\n');
      const answer = await lines.next(1_000);
      if (answer === 'W') return { lines, address };
      lines.destroy();
      if (answer?.startsWith('M ') === true && addresses.includes(answer.slice(2))) {
        hint = answer.slice(2);
        continue;
      }
    }
    await sleep(50);
  }
  return undefined;
}

/** Observes `keys` on the leader, and again on the next leader after every close (or 3 s of
 * silence), until `stop()`. Every `V` goes to `sink`, in arrival order. */
export class Observer {
  /** Connections it made: the leader's address and when the `O`s were sent. */
  readonly connections: Array<{ address: string; since: number }> = [];
  /** Lines other than `V` it received (there should be none but `E not_active` at a close). */
  readonly others: string[] = [];
  #running = true;
  #current: Lines | undefined;
  readonly #loop: Promise<void>;

  constructor(
    readonly id: number,
    addresses: readonly string[],
    keys: readonly string[],
    sink: Observation[],
  ) {
    this.#loop = this.#run(addresses, keys, sink);
  }

  async #run(addresses: readonly string[], keys: readonly string[], sink: Observation[]): Promise<void> {
    while (this.#running) {
      const found = await leaderConnection(addresses, 30_000, () => !this.#running);
      if (found === undefined) continue;
      const { lines, address } = found;
      if (!this.#running) {
        lines.destroy();
        return;
      }
      this.#current = lines;
      const since = performance.now();
      this.connections.push({ address, since });
      let heardAt = since;
      // A paused leader keeps its connections open and silent: ping with `W` (answered at once,
      // never held), and leave a connection that stays silent for 3 s.
      const ping = setInterval(() => {
        if (performance.now() - heardAt > 3_000) lines.destroy();
        else lines.socket.write('W\n');
      }, 1_000);
      lines.onLine = (line) => {
        heardAt = performance.now();
        if (line === 'W') return;
        const reply = electionReply(line);
        if (reply?.op !== 'V') {
          if (!line.startsWith('L ')) this.others.push(line);
          return;
        }
        const { view } = reply;
        if (view.holders === 'many') {
          this.others.push(line);
          return;
        }
        const holder =
          view.holders === 0 ? undefined : { token: BigInt(view.token), owner: view.owner, value: view.value };
        sink.push({ observer: this.id, key: reply.key, rev: BigInt(reply.rev), holder, at: performance.now(), since });
      };
      lines.socket.write(keys.map((key) => `O ${key}\n`).join(''));
      await lines.closedPromise;
      clearInterval(ping);
    }
  }

  /** Ends the observations (bounded: the leader search gives up at once). */
  async stop(): Promise<void> {
    this.#running = false;
    this.#current?.destroy();
    await this.#loop;
  }
}

/** Publishes for the holders of a load (`startLoad`'s `whileHeld`), one `P` at a time on one
 * connection to the leader, found again after a close. */
export class Publisher {
  #lines: Lines | undefined;
  #stopped = false;

  constructor(private readonly addresses: readonly string[]) {}

  /** Sends `P <key> <token> <value>` for `grant`, recorded in `grant.publishes`. */
  async publish(grant: Grant, value: string, timeoutMs = 2_000): Promise<Publish['result']> {
    if (this.#lines === undefined || this.#lines.closed) {
      this.#lines = (await leaderConnection(this.addresses, timeoutMs, () => this.#stopped))?.lines;
      if (this.#lines === undefined) return 'refused'; // not sent
    }
    const lines = this.#lines;
    const sent: Publish = { value, sentAt: performance.now(), result: 'pending' };
    (grant.publishes ??= []).push(sent);
    lines.socket.write(`P ${grant.key} ${grant.token} ${value}\n`);
    const answer = await lines.next(timeoutMs);
    if (answer === `P ${grant.token} ${grant.key}`) sent.result = 'published';
    else if (answer === `G ${grant.token} ${grant.key}`) sent.result = 'refused';
    else {
      // A close, `E`, `M` or no answer in time: whether it took effect is unknown.
      sent.result = 'indeterminate';
      lines.destroy();
      this.#lines = undefined;
    }
    return sent.result;
  }

  stop(): void {
    this.#stopped = true;
    this.#lines?.destroy();
  }
}
