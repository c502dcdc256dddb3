#!/usr/bin/env node
/**
 * One process of the observers benchmark's observers (observers.mjs forks it): `count` raw TCP
 * connections, each observing `key` (`O <key>`). Per rev of the key seen while recording: the
 * holder field of its `V`, how many connections received it, and when the first and the last of
 * them did (performance.timeOrigin + performance.now(), the clock the coordinator shares). Told
 * over IPC: `start` (record from now), `stop` (send what was recorded and this process's CPU over
 * it), `close`.
 */
import { once } from 'node:events';
import net from 'node:net';

const { port, key, count } = JSON.parse(process.argv[2]);
const now = () => performance.timeOrigin + performance.now();

let byRev = new Map();
let recording = false;
let cpuStart;
/** Lines that are not a well-formed `V` of the key; revs a connection did not get (a jump). */
let strayLines = 0;
let skippedRevs = 0;

function connect() {
  const socket = net.connect({ port, host: '127.0.0.1', noDelay: true });
  let partial = '';
  let lastRev = -1;
  socket.on('data', (chunk) => {
    const at = now();
    const lines = (partial + chunk.toString('latin1')).split('\n');
    partial = lines.pop();
    for (const line of lines) {
      // V <key> <rev> <holder…>: the holder is `-`, `*<count>`, or `<token> <owner>[ <value>]`.
      const fields = line.split(' ', 4);
      if (fields[0] !== 'V' || fields[1] !== key || fields.length < 4) {
        strayLines++;
        continue;
      }
      const rev = Number(fields[2]);
      if (lastRev >= 0 && rev !== lastRev + 1) skippedRevs += Math.max(0, rev - lastRev - 1);
      const first = lastRev < 0;
      lastRev = rev;
      if (first) socket.emit('observing');
      if (!recording) continue;
      const seen = byRev.get(rev);
      if (seen === undefined) byRev.set(rev, { holder: fields[3], count: 1, first: at, last: at });
      else {
        seen.count++;
        seen.last = at;
      }
    }
  });
  socket.on('error', (error) => {
    console.error(`observer: ${error.message}`);
    process.exit(1);
  });
  socket.write(`O ${key}\n`);
  return socket;
}

const sockets = Array.from({ length: count }, connect);
await Promise.all(sockets.map((socket) => once(socket, 'observing')));
process.send({ ready: true });

process.on('message', (message) => {
  if (message === 'start') {
    byRev = new Map();
    strayLines = 0;
    skippedRevs = 0;
    recording = true;
    cpuStart = process.cpuUsage();
  } else if (message === 'stop') {
    recording = false;
    const cpu = process.cpuUsage(cpuStart);
    const revs = [...byRev].map(([rev, seen]) => ({ rev, ...seen }));
    process.send({ revs, cpu, strayLines, skippedRevs });
  } else if (message === 'close') {
    for (const socket of sockets) socket.destroy();
    process.disconnect();
  }
});
