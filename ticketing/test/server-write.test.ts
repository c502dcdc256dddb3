// The server writes a turn's replies after the poll phase (ticketing/src/server/connections.ts
// #flushQueuedReplies): every connection read in one turn of the event loop is answered before the
// first write of that turn, with one write per connection. Writing each connection's replies right
// after its read woke the peer once per connection while reads were still to do
// (docs/ticketing-bench.md "Levers tried"). Observed in process: the effects channel marks
// each request as applied, and a pass-through spy on net.Socket's write marks each write.
import diagnostics from 'node:diagnostics_channel';
import net from 'node:net';
import { afterEach, expect, test } from 'vitest';
import { LineSocket, startServer } from './helpers.js';

const events: string[] = [];
const onEffect = (message: unknown): void => {
  if ((message as { effect: { type: string } }).effect.type === 'granted') events.push('granted');
};
// eslint-disable-next-line @typescript-eslint/unbound-method -- restored as it was, and called with apply
const write = net.Socket.prototype.write;
afterEach(() => {
  net.Socket.prototype.write = write;
  diagnostics.unsubscribe('ticketing:server:effect', onEffect);
});

test("the requests of every connection read in one turn are applied before that turn's writes", async () => {
  const server = await startServer();
  try {
    const sockets = await Promise.all([0, 1, 2].map(() => LineSocket.connect(server.port)));
    // One round trip each first, so that all three are accepted and reading.
    for (const [i, socket] of sockets.entries()) {
      socket.write(`A warm${i} owner${i} 0\n`);
      expect(await socket.readLine()).toMatch(new RegExp(`^A \\d+ owner${i} warm${i}$`));
    }
    // Loopback delivers each request within its write(); the event loop is then held so that the
    // next poll finds all three connections readable in one turn.
    sockets.forEach((socket, i) => socket.write(`A key${i} owner${i} 1000\nA more${i} owner${i} 1000\n`));
    diagnostics.subscribe('ticketing:server:effect', onEffect);
    net.Socket.prototype.write = function (this: net.Socket, ...args: unknown[]) {
      events.push('write');
      return (write as (...a: unknown[]) => boolean).apply(this, args);
    };
    const until = Date.now() + 200;
    while (Date.now() < until); // holds the loop: nothing is read until it ends
    for (const [i, socket] of sockets.entries()) {
      expect(await socket.readLine()).toMatch(new RegExp(`^A \\d+ owner${i} key${i}$`));
      expect(await socket.readLine()).toMatch(new RegExp(`^A \\d+ owner${i} more${i}$`));
    }
    // Six grants, then one write per connection: not a write after each connection's read.
    expect(events).toEqual([...Array<string>(6).fill('granted'), 'write', 'write', 'write']);
    for (const socket of sockets) socket.socket.destroy();
  } finally {
    await server.close();
  }
});
