import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach } from 'vitest';

const AGENT = fileURLToPath(new URL('../fixtures/lease-agent.mjs', import.meta.url));

export interface AgentGrant {
  sessionId: string;
  owner: string;
  token: string;
  expiry: number;
}
export interface AgentReply {
  ok: boolean;
  at?: number;
  code?: string;
  message?: string;
  grant?: AgentGrant;
  pid?: number;
}

/** A separate Node process holding leases through the built package (test/fixtures/lease-agent.mjs). */
export class LeaseAgent {
  readonly child: ChildProcess;
  readonly exited: Promise<[number | null, NodeJS.Signals | null]>;
  readonly #replies: AgentReply[] = [];
  readonly #waiting: Array<(reply: AgentReply) => void> = [];
  /** Unsolicited lines (a hold's renew/reclaim/lost), in order. */
  readonly events: Array<{ event: string; code?: string; grant?: AgentGrant; aborted?: boolean }> = [];
  readonly #eventWaiters: Array<() => void> = [];
  stderr = '';

  private constructor(dir: string, ttlMs: number | undefined, options: SpawnOptions) {
    const args = [AGENT, dir, ...(ttlMs === undefined ? [] : [String(ttlMs)])];
    this.child = spawn(process.execPath, args, { stdio: ['pipe', 'pipe', 'pipe'], ...options });
    this.exited = once(this.child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
    this.child.stderr!.on('data', (chunk: Buffer) => (this.stderr += chunk.toString()));
    createInterface({ input: this.child.stdout! }).on('line', (line) => {
      const parsed = JSON.parse(line) as AgentReply & { event?: string };
      if (parsed.event !== undefined) {
        this.events.push(parsed as (typeof this.events)[number]);
        for (const wake of this.#eventWaiters.splice(0)) wake();
        return;
      }
      const reply = parsed;
      const waiter = this.#waiting.shift();
      if (waiter) waiter(reply);
      else this.#replies.push(reply);
    });
    live.add(this);
  }

  static async start(dir: string, ttlMs?: number, options: SpawnOptions = {}): Promise<LeaseAgent> {
    const agent = new LeaseAgent(dir, ttlMs, options);
    const ready = await agent.#next();
    if (!ready.ok) throw new Error(`agent failed to start: ${agent.stderr}`);
    return agent;
  }

  get pid(): number {
    return this.child.pid!;
  }

  #next(): Promise<AgentReply> {
    const queued = this.#replies.shift();
    if (queued) return Promise.resolve(queued);
    return new Promise((resolve, reject) => {
      this.#waiting.push(resolve);
      void this.exited.then(([code, signal]) => reject(new Error(`agent exited (${code ?? signal}): ${this.stderr}`)));
    });
  }

  call(command: Record<string, unknown>): Promise<AgentReply> {
    this.child.stdin!.write(`${JSON.stringify(command)}\n`);
    return this.#next();
  }

  async acquire(id: string, owner: string, waitMs?: number): Promise<AgentGrant> {
    const reply = await this.call({ op: 'acquire', id, owner, waitMs });
    if (!reply.ok) throw Object.assign(new Error(reply.message), { code: reply.code });
    return reply.grant!;
  }

  /** Resolves once an event line matching `name` has arrived (past or future). */
  async event(name: string): Promise<(typeof this.events)[number]> {
    for (;;) {
      const found = this.events.find((e) => e.event === name);
      if (found) return found;
      await new Promise<void>((resolve) => this.#eventWaiters.push(resolve));
    }
  }

  kill(signal: NodeJS.Signals = 'SIGKILL'): void {
    this.child.kill(signal);
  }
}

const live = new Set<LeaseAgent>();
afterEach(() => {
  for (const agent of live) {
    agent.child.kill('SIGKILL');
    live.delete(agent);
  }
});
