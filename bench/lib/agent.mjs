// The parent's side of bench/agents/agent.mjs: spawn one, send commands, read its answers in order.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const AGENT = join(dirname(fileURLToPath(import.meta.url)), '..', 'agents', 'agent.mjs');

export class Agent {
  static async start() {
    const agent = new Agent();
    const ready = await agent.next();
    if (!ready.ok) throw new Error(`agent failed to start: ${JSON.stringify(ready)}`);
    return agent;
  }

  constructor() {
    this.child = spawn(process.execPath, [AGENT], { stdio: ['pipe', 'pipe', 'inherit'] });
    this.lines = [];
    this.waiting = [];
    this.exited = once(this.child, 'exit');
    createInterface({ input: this.child.stdout }).on('line', (line) => {
      const message = JSON.parse(line);
      const waiter = this.waiting.shift();
      if (waiter) waiter.resolve(message);
      else this.lines.push(message);
    });
    this.child.on('exit', (code, signal) => {
      for (const waiter of this.waiting.splice(0)) waiter.reject(new Error(`agent exited (${code ?? signal})`));
    });
  }

  /** The next line the agent writes. */
  next(timeoutMs = 120_000) {
    if (this.lines.length > 0) return Promise.resolve(this.lines.shift());
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('agent did not answer in time')), timeoutMs);
      this.waiting.push({
        resolve: (m) => (clearTimeout(timer), resolve(m)),
        reject: (e) => (clearTimeout(timer), reject(e)),
      });
    });
  }

  send(command) {
    this.child.stdin.write(`${JSON.stringify(command)}\n`);
  }

  /** Sends a command and returns its final answer (skipping an `ack`); throws if it failed. */
  async call(command) {
    this.send(command);
    for (;;) {
      const message = await this.next();
      if (message.ack) continue;
      if (!message.ok) throw new Error(`${command.op}: ${message.code} ${message.message}`);
      return message;
    }
  }

  /** Sends `lock` and resolves once the agent has called lock() (its `ack`); the result comes later. */
  async startLock(id) {
    this.send({ op: 'lock', id });
    const ack = await this.next();
    if (!ack.ack) throw new Error(`lock: ${JSON.stringify(ack)}`);
    return ack;
  }

  /** The answer to a lock sent with startLock. */
  async lockResult(timeoutMs) {
    const message = await this.next(timeoutMs);
    if (!message.ok) throw new Error(`lock: ${message.code} ${message.message}`);
    return message;
  }

  kill(signal = 'SIGKILL') {
    this.child.kill(signal);
    return this.exited;
  }

  async stop() {
    this.child.stdin.end();
    await this.exited;
  }
}
