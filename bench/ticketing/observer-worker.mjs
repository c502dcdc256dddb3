#!/usr/bin/env node
/**
 * One process of the observers benchmark's observers (observers.mjs forks it): `count` raw TCP
 * connections, each observing `key` (`O <key>`). Per rev of the key seen while recording: the
 * holder field of its `V`, how many connections received it, and when the first and the last of
 * them did (performance.timeOrigin + performance.now(), the clock the coordinator shares). Told
 * over IPC: `start` (record from now), `{ stop: <token> }` (once every connection has the `V` of
 * the grant under that token, or after 5 s: send what was recorded, and this process's CPU and the
 * seconds it recorded), `close`.
 */
import { once } from 'node:events';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

const { port, key, count } = JSON.parse(process.argv[2]);
const now = () => performance.timeOrigin + performance.now();

let byRev = new Map();
let recording = false;
let cpuStart;
let recordingSince = 0;
/** Lines that are not a well-formed `V` of the key; revs a connection did not get (a jump). */
let strayLines = 0;
let skippedRevs = 0;
/** Each connection's last rev (-1 before its first `V`). */
const lastRevs = [];

/** Every connection reads into this one buffer (net's `onread`: no stream, no Buffer per read),
 * so the reader costs as little as Node allows and the figures say more about the server. */
const readBuffer = Buffer.allocUnsafe(64 * 1024);

function connect(index) {
  let partial = '';
  let wasVacant = false;
  lastRevs[index] = -1;
  const onLine = (line, at) => {
    // V <key> <rev> <holder…>: the holder is `-`, `*<count>`, or `<token> <owner>[ <value>]`.
    const fields = line.split(' ', 4);
    if (fields[0] !== 'V' || fields[1] !== key || fields.length < 4) {
      strayLines++;
      return;
    }
    const rev = Number(fields[2]);
    const lastRev = lastRevs[index];
    // Out of the vacancy before the key's first grant, rev jumps to that grant's token: no changes
    // were missed (docs/ticketing-election.md, Revs).
    if (lastRev >= 0 && !wasVacant && rev !== lastRev + 1) skippedRevs += Math.max(0, rev - lastRev - 1);
    wasVacant = fields[3] === '-';
    const first = lastRev < 0;
    lastRevs[index] = rev;
    if (first) socket.emit('observing');
    if (!recording) return;
    const seen = byRev.get(rev);
    if (seen === undefined) byRev.set(rev, { holder: fields[3], count: 1, first: at, last: at });
    else {
      seen.count++;
      seen.last = at;
    }
  };
  const onread = {
    buffer: readBuffer,
    callback(bytes, buffer) {
      const at = now();
      let start = 0;
      for (let newline = buffer.indexOf(10); newline !== -1 && newline < bytes; newline = buffer.indexOf(10, start)) {
        onLine(partial + buffer.toString('latin1', start, newline), at);
        partial = '';
        start = newline + 1;
      }
      if (start < bytes) partial += buffer.toString('latin1', start, bytes);
    },
  };
  const socket = net.connect({ port, host: '127.0.0.1', noDelay: true, onread });
  socket.on('error', (error) => {
    console.error(`observer: ${error.message}`);
    process.exit(1);
  });
  socket.write(`O ${key}\n`);
  return socket;
}

const sockets = Array.from({ length: count }, (_, index) => connect(index));

/** Until every connection has the `V` of `token`'s grant (a loaded machine delivers late), at most 5 s. */
async function caughtUp(token) {
  for (const deadline = performance.now() + 5_000; performance.now() < deadline; await sleep(10)) {
    const rev = [...byRev].find(([, seen]) => seen.holder === token)?.[0];
    if (rev !== undefined && lastRevs.every((last) => last >= rev)) return;
  }
}

await Promise.all(sockets.map((socket) => once(socket, 'observing')));
process.send({ ready: true });

process.on('message', async (message) => {
  if (message === 'start') {
    byRev = new Map();
    strayLines = 0;
    skippedRevs = 0;
    recording = true;
    cpuStart = process.cpuUsage();
    recordingSince = performance.now();
  } else if (message.stop !== undefined) {
    await caughtUp(message.stop);
    recording = false;
    const cpu = process.cpuUsage(cpuStart);
    const revs = [...byRev].map(([rev, seen]) => ({ rev, ...seen }));
    const seconds = (performance.now() - recordingSince) / 1000;
    process.send({ revs, cpu, seconds, strayLines, skippedRevs });
  } else if (message === 'close') {
    for (const socket of sockets) socket.destroy();
    process.disconnect();
  }
});
