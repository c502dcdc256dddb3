#!/usr/bin/env node
/**
 * The Node floor of the server benchmark (bench.mjs, docs/ticketing.md "Benchmark"): the least
 * work any Node server speaking the Ticketing protocol over node:net can do per batch. The same
 * `net.createServer` socket options, the same reading set-up as the Ticketing server (server.ts
 * `#adopt`: every connection reads into one shared buffer through `onread`) and the same writing
 * (server.ts `#flushQueuedReplies`: each connection's replies from one turn of the loop in one
 * `socket.write`, after the poll phase), and replies the load generator accepts: `A key owner wait` → `A <token> owner key`
 * (the token a counter), `R key token` → `R token key`. No lock table, no state machine, no queue,
 * no timers, no validation beyond splitting lines at `\n` and fields at spaces: whatever Ticketing
 * spends beyond this is its own; what this spends is node:net's (libuv, the stream layer, V8) per
 * read and write. Only the distinct-key workloads (there is no queue for the hot key).
 *
 *   node bench/ticketing/node-floor.mjs [port]   → prints `listening 127.0.0.1:<port>`
 */
import net from 'node:net';

const NL = 10;
const SP = 32;
// A turn's replies for one connection: the load generator keeps at most 64 requests in flight on
// one, far below this (no bounds checks: this is a floor, not a server).
const OUT_BYTES = 256 * 1024;
let token = 0;
/** Where the unanswered (unfinished) input starts, after `answer`. */
let consumed = 0;

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

/** Answers the complete lines of buf[0, end) into out from `pos`; returns the position after the
 * replies and leaves the end of the last complete line in `consumed`. */
function answer(buf, end, out, pos) {
  let start = 0;
  for (let nl = buf.indexOf(NL, start); nl !== -1 && nl < end; nl = buf.indexOf(NL, start)) {
    const a = buf.indexOf(SP, start + 2); // end of the key
    if (buf[start] === 0x41) {
      // A key owner wait → A token owner key
      const b = buf.indexOf(SP, a + 1); // end of the owner
      out[pos++] = 0x41;
      out[pos++] = SP;
      pos = putNumber(out, pos, ++token);
      out[pos++] = SP;
      pos += buf.copy(out, pos, a + 1, b);
      out[pos++] = SP;
      pos += buf.copy(out, pos, start + 2, a);
    } else {
      // R key token → R token key
      out[pos++] = 0x52;
      out[pos++] = SP;
      pos += buf.copy(out, pos, a + 1, nl);
      out[pos++] = SP;
      pos += buf.copy(out, pos, start + 2, a);
    }
    out[pos++] = NL;
    start = nl + 1;
  }
  consumed = start;
  return pos;
}

/** One receive buffer for every connection, as the server has (reads are handled one at a time). */
const inbuf = Buffer.allocUnsafeSlow(64 * 1024);

/** The server's reading set-up (server.ts #adopt): the accepted handle re-wrapped with `onread`. */
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

/** Connections with replies not yet written, and the one end-of-turn write of them. */
let pending = [];
function writePending() {
  const connections = pending;
  pending = [];
  for (const conn of connections) conn.write();
}

const server = net.createServer(
  { noDelay: true, allowHalfOpen: false, keepAlive: true, keepAliveInitialDelay: 30_000, pauseOnConnect: true },
  (accepted) => {
    accepted.on('error', () => {});
    let out = Buffer.allocUnsafe(OUT_BYTES);
    let pos = 0;
    let rest;
    const conn = {
      write() {
        socket.write(out.subarray(0, pos));
        pos = 0;
        // The stream keeps what the kernel did not take: then the next reply needs a new buffer.
        if (socket.writableLength > 0) out = Buffer.allocUnsafe(OUT_BYTES);
      },
    };
    const socket = adopt(accepted, (chunk) => {
      const buf = rest === undefined ? chunk : Buffer.concat([rest, chunk]);
      const before = pos;
      pos = answer(buf, buf.length, out, pos);
      // A copy: the chunk is a view of the receive buffer, which the next read reuses.
      rest = consumed < buf.length ? Buffer.from(buf.subarray(consumed)) : undefined;
      if (pos === before || before > 0) return; // nothing new, or already pending
      if (pending.length === 0) setImmediate(writePending);
      pending.push(conn);
    });
    socket.on('error', () => {});
  },
);
server.listen({ host: '127.0.0.1', port: Number(process.argv[2] ?? 0) }, () => {
  const { address, port } = server.address();
  process.stdout.write(`listening ${address}:${port}\n`);
});
process.on('SIGTERM', () => process.exit(0));
