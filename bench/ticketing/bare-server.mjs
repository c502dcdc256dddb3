#!/usr/bin/env node
/**
 * The Node floor of the server benchmark (bench.mjs, docs/ticketing-bench.md): the least
 * work any Node server speaking the Ticketing protocol over node:net can do per batch. The same
 * `net.createServer` socket options, the same reading set-up as the Ticketing server (server/connection.ts
 * `adoptSocket`: every connection reads into one shared buffer through `onread`) and the same writing
 * (server/connections.ts `#flushQueuedReplies`: each connection's replies from one turn of the loop in one
 * `socket.write`, after the poll phase). Replies are what the load generator accepts:
 * `A key owner wait` → `A <token> owner key` (the token a counter), `R key token` → `R token key`.
 * No state machine, no timers, no validation beyond splitting lines at `\n` and fields at spaces:
 * whatever Ticketing spends beyond this is its own; what this spends is node:net's (libuv, the
 * stream layer, V8) per read and write.
 *
 * Plain, it grants every acquire at once (no lock table: the distinct-key workloads). With `--fifo`
 * it keeps, per held key, a FIFO of waiters and grants the head on each release: the least a server
 * must do for one hot key, where a cycle is a hand-off (the hot-key workloads).
 *
 *   node bench/ticketing/bare-server.mjs [--fifo] [port]   → prints `listening 127.0.0.1:<port>`
 */
import net from 'node:net';

const NL = 10;
const SP = 32;
// A turn's replies for one connection: the load generator keeps at most 64 requests in flight on
// one, far below this (no bounds checks: this is a floor, not a server).
const OUT_BYTES = 256 * 1024;
const fifo = process.argv.includes('--fifo');
const port = Number(process.argv.slice(2).find((arg) => arg !== '--fifo') ?? 0);
let token = 0;
/** `--fifo`: held key → its waiters, oldest first ({ conn, owner bytes }). */
const held = new Map();

/** Writes `n` in decimal at `out[pos]`; returns the position after it. */
function putNumber(out, pos, n) {
  let digits = 1;
  for (let x = n; x >= 10; x = Math.floor(x / 10)) digits++;
  for (let i = pos + digits - 1; i >= pos; i--) {
    out[i] = 48 + (n % 10);
    n = Math.floor(n / 10);
  }
  return pos + digits;
}

/** Connections with replies not yet written, and the one end-of-turn write of them. */
let pending = [];
function writePending() {
  const connections = pending;
  pending = [];
  for (const conn of connections) conn.write();
}

class Connection {
  out = Buffer.allocUnsafe(OUT_BYTES);
  pos = 0;
  /** The unfinished line of the last read (a copy). */
  rest = undefined;
  socket = undefined;

  /** The reply buffer, with this connection queued for the end-of-turn write. */
  reserve() {
    if (this.pos === 0) {
      if (pending.length === 0) setImmediate(writePending);
      pending.push(this);
    }
    return this.out;
  }

  /** `A <token> owner key` for the owner at buf[ownerStart, ownerEnd) and the key at buf[keyStart, keyEnd). */
  grant(buf, ownerStart, ownerEnd, keyStart, keyEnd) {
    const out = this.reserve();
    let pos = this.pos;
    out[pos++] = 0x41;
    out[pos++] = SP;
    pos = putNumber(out, pos, ++token);
    out[pos++] = SP;
    pos += buf.copy(out, pos, ownerStart, ownerEnd);
    out[pos++] = SP;
    pos += buf.copy(out, pos, keyStart, keyEnd);
    out[pos++] = NL;
    this.pos = pos;
  }

  /** `R token key` for `R key token` at buf[start, nl). */
  released(buf, start, keyEnd, nl) {
    const out = this.reserve();
    let pos = this.pos;
    out[pos++] = 0x52;
    out[pos++] = SP;
    pos += buf.copy(out, pos, keyEnd + 1, nl);
    out[pos++] = SP;
    pos += buf.copy(out, pos, start + 2, keyEnd);
    out[pos++] = NL;
    this.pos = pos;
  }

  /** Answers the complete lines of `buf`; keeps the unfinished end. */
  answer(buf) {
    let start = 0;
    for (let nl = buf.indexOf(NL, start); nl !== -1; nl = buf.indexOf(NL, start)) {
      const keyEnd = buf.indexOf(SP, start + 2);
      if (buf[start] === 0x41) {
        // A key owner wait
        const ownerEnd = buf.indexOf(SP, keyEnd + 1);
        if (fifo) {
          const key = buf.latin1Slice(start + 2, keyEnd);
          const waiters = held.get(key);
          if (waiters !== undefined) {
            waiters.push({ conn: this, line: Buffer.from(buf.subarray(start, ownerEnd)) });
            start = nl + 1;
            continue;
          }
          held.set(key, []);
        }
        this.grant(buf, keyEnd + 1, ownerEnd, start + 2, keyEnd);
      } else {
        // R key token
        this.released(buf, start, keyEnd, nl);
        if (fifo) {
          const key = buf.latin1Slice(start + 2, keyEnd);
          const waiters = held.get(key);
          const next = waiters?.shift();
          if (next === undefined) held.delete(key);
          else next.conn.grant(next.line, keyEnd - start + 1, next.line.length, 2, keyEnd - start);
        }
      }
      start = nl + 1;
    }
    // A copy: the chunk is a view of the receive buffer, which the next read reuses.
    this.rest = start < buf.length ? Buffer.from(buf.subarray(start)) : undefined;
  }

  write() {
    this.socket.write(this.out.subarray(0, this.pos));
    this.pos = 0;
    // The stream keeps what the kernel did not take: then the next reply needs a new buffer.
    if (this.socket.writableLength > 0) this.out = Buffer.allocUnsafe(OUT_BYTES);
  }
}

/** One receive buffer for every connection, as the server has (reads are handled one at a time). */
const inbuf = Buffer.allocUnsafeSlow(64 * 1024);

/** The server's reading set-up (server/connection.ts adoptSocket): the accepted handle re-wrapped with `onread`. */
function adopt(accepted, onChunk) {
  const handle = accepted._handle;
  if (typeof handle?.readStart !== 'function') {
    accepted.on('data', onChunk);
    accepted.resume();
    return accepted;
  }
  accepted._handle = null;
  accepted.destroy();
  return new net.Socket({
    handle,
    allowHalfOpen: false,
    readable: true,
    writable: true,
    onread: { buffer: inbuf, callback: (bytes) => (onChunk(inbuf.subarray(0, bytes)), true) },
  });
}

const server = net.createServer(
  { noDelay: true, allowHalfOpen: false, keepAlive: true, keepAliveInitialDelay: 30_000, pauseOnConnect: true },
  (accepted) => {
    accepted.on('error', () => {});
    const conn = new Connection();
    conn.socket = adopt(accepted, (chunk) =>
      conn.answer(conn.rest === undefined ? chunk : Buffer.concat([conn.rest, chunk])),
    );
    conn.socket.on('error', () => {});
  },
);
server.listen({ host: '127.0.0.1', port }, () => {
  const { address, port } = server.address();
  process.stdout.write(`listening ${address}:${port}\n`);
});
process.on('SIGTERM', () => process.exit(0));
