// Drives torture agents (agent.mjs): real child processes holding leases through the built
// package, plus signals (SIGKILL, SIGSTOP, SIGCONT), a view of their process state, and checks of
// a lease directory's consistency shared by the scenarios.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { afterEach } from 'vitest';
import { parseLeaseFileName } from '../../src/flock/layout.js';
import { parseRecord, type LeaseRecord } from '../../src/flock/record.js';

const AGENT = fileURLToPath(new URL('./agent.mjs', import.meta.url));

export interface Grant {
  sessionId: string;
  owner: string;
  token: string;
  expiry: number;
}
export interface Reply {
  seq: number;
  ok: boolean;
  started: number;
  settled: number;
  code?: string;
  name?: string;
  message?: string;
  syscall?: string;
  path?: string;
  committed?: boolean;
  holder?: { owner: string; token: string };
  grant?: Grant;
  at?: number;
  attempts?: number;
  refusedUntil?: number;
  fds?: Array<{ fd: number; target: string }>;
  events?: Array<Record<string, unknown>>;
}
export interface AgentOptions {
  ttlMs?: number;
  transitionTimeoutMs?: number;
}

/** Epoch ms with sub-millisecond precision, comparable with the agents' times. */
export const now = (): number => performance.timeOrigin + performance.now();

const running = new Set<Agent>();
afterEach(async () => {
  for (const agent of running) {
    agent.child.kill('SIGKILL');
    await agent.exited;
  }
  running.clear();
});

export class Agent {
  readonly child: ChildProcess;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stderr = '';
  #seq = 0;
  readonly #pending = new Map<number, (reply: Reply) => void>();
  #exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;

  private constructor(dir: string, options: AgentOptions) {
    this.child = spawn(process.execPath, [AGENT, dir, JSON.stringify(options)], { stdio: ['pipe', 'pipe', 'pipe'] });
    this.exited = once(this.child, 'exit').then((args) => {
      const [code, signal] = args as [number | null, NodeJS.Signals | null];
      this.#exit = { code, signal };
      const error = {
        seq: -1,
        ok: false,
        started: 0,
        settled: 0,
        code: 'EAGENTEXITED',
        message: `agent exited (${code ?? signal}): ${this.stderr}`,
      };
      for (const resolve of this.#pending.values()) resolve(error);
      this.#pending.clear();
      return this.#exit;
    });
    this.child.stderr!.on('data', (chunk: Buffer) => (this.stderr += chunk.toString()));
    createInterface({ input: this.child.stdout! }).on('line', (line) => {
      const reply = JSON.parse(line) as Reply;
      this.#pending.get(reply.seq)?.(reply);
      this.#pending.delete(reply.seq);
    });
    running.add(this);
  }

  static async start(dir: string, options: AgentOptions = {}): Promise<Agent> {
    const agent = new Agent(dir, options);
    const ready = await new Promise<Reply>((resolve) => agent.#pending.set(0, resolve));
    if (!ready.ok) throw new Error(`agent failed to start: ${agent.stderr}`);
    return agent;
  }

  get pid(): number {
    return this.child.pid!;
  }

  /** Sends a command; resolves with its reply (or an EAGENTEXITED reply if the agent dies first). */
  call(command: Record<string, unknown>): Promise<Reply> {
    const seq = ++this.#seq;
    const reply = new Promise<Reply>((resolve) => this.#pending.set(seq, resolve));
    if (this.#exit !== undefined)
      return Promise.resolve({ seq, ok: false, started: 0, settled: 0, code: 'EAGENTEXITED', message: 'agent exited' });
    this.child.stdin!.write(`${JSON.stringify({ ...command, seq })}\n`);
    return reply;
  }

  /** Like call, but throws unless the reply is ok. */
  async must(command: Record<string, unknown>): Promise<Reply> {
    const reply = await this.call(command);
    if (!reply.ok)
      throw Object.assign(new Error(`${String(command.op)} failed: ${reply.code} ${reply.message}`), { reply });
    return reply;
  }

  async acquire(id: string, owner: string): Promise<Grant> {
    return (await this.must({ op: 'acquire', id, owner })).grant!;
  }

  signal(signal: NodeJS.Signals): number {
    const at = now();
    this.child.kill(signal);
    return at;
  }

  /** The process state letter from /proc (R, S, T = stopped, Z, …), or undefined once reaped. */
  state(): string | undefined {
    try {
      const stat = fs.readFileSync(`/proc/${this.pid}/stat`, 'utf8');
      return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
    } catch {
      return undefined;
    }
  }

  /** Waits until the process is stopped (it stopped itself at a fault point, or was SIGSTOPped). */
  async stopped(timeoutMs = 10_000): Promise<void> {
    const until = Date.now() + timeoutMs;
    while (this.state() !== 'T' && this.state() !== 't') {
      if (Date.now() > until) throw new Error(`agent ${this.pid} did not stop (state ${this.state()}): ${this.stderr}`);
      await sleep(2);
    }
  }

  /** This agent's open descriptors and what each names (from /proc, so it works while the agent
   * is stopped). */
  #fds(): Array<[fd: string, target: string]> {
    return fs
      .readdirSync(`/proc/${this.pid}/fd`)
      .map((fd): [string, string] => {
        try {
          return [fd, fs.readlinkSync(`/proc/${this.pid}/fd/${fd}`)];
        } catch {
          return [fd, ''];
        }
      })
      .filter(([, target]) => target !== '');
  }

  /** What this agent's open descriptors name, sorted. */
  fdTargets(): string[] {
    return this.#fds()
      .map(([, target]) => target)
      .sort();
  }

  /** A path that opens this agent's descriptor of `target` again (the same inode, a removed file
   * too), or `undefined` if it has none open. */
  reopenPath(target: string): string | undefined {
    const fd = this.#fds().find(([, named]) => named === target)?.[0];
    return fd === undefined ? undefined : `/proc/${this.pid}/fd/${fd}`;
  }
}

// ---------------------------------------------------------------------------------------------
// A lease directory's consistency, as the crash-point and leftover scenarios require it.

export interface DirState {
  /** the record, parsed (it must parse), or undefined when there is none */
  record: LeaseRecord | undefined;
  /** tokens named by .live files */
  liveTokens: bigint[];
  temps: string[];
  unknown: string[];
}

/** Reads an id's files in `dir`; throws if the record does not parse. */
export function dirState(dir: string, safe: string): DirState {
  const state: DirState = { record: undefined, liveTokens: [], temps: [], unknown: [] };
  for (const name of fs.readdirSync(dir)) {
    const parsed = parseLeaseFileName(name);
    if (parsed === undefined || parsed.safe !== safe) {
      state.unknown.push(name);
      continue;
    }
    if (parsed.kind === 'record') state.record = parseRecord(fs.readFileSync(join(dir, name)));
    else if (parsed.kind === 'live') state.liveTokens.push(parsed.token);
    else if (parsed.kind === 'temp') state.temps.push(name);
  }
  return state;
}

/** Percentile of a sorted list. */
export function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}
