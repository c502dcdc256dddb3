// The server reads each accepted connection into one shared receive buffer through `onread`, by
// re-wrapping the accepted socket's handle (net.Server offers no onread; ticketing/src/server/connection.ts
// adoptSocket). That leans on Node internals (`_handle`, the `handle` option), with the plain 'data'
// path as the fallback: this file fails when a Node release moves them, so the fast path is never
// lost without notice. Run on Node 20; the same check passed by hand on Node 24.22.
import net from 'node:net';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { LineSocket, startServer } from './helpers.js';

let adopted = 0;
const NodeSocket = net.Socket;
beforeAll(() => {
  // Counts the sockets the server makes from an accepted handle, reading through onread.
  net.Socket = class extends NodeSocket {
    constructor(options?: net.SocketConstructorOpts & { handle?: unknown; onread?: unknown }) {
      if (options?.handle !== undefined && options.onread !== undefined) adopted++;
      super(options);
    }
  };
});
afterAll(() => {
  net.Socket = NodeSocket;
});

test('accepted connections are read through onread into the shared buffer, and served', async () => {
  const server = await startServer();
  try {
    const sockets = await Promise.all([0, 1, 2].map(() => LineSocket.connect(server.port)));
    // Requests split across reads, one byte at a time for one of them: the framer keeps what it
    // needs beyond the shared buffer's next read.
    const [a, b, c] = sockets as [LineSocket, LineSocket, LineSocket];
    for (const byte of 'A one a 1000\n') a.write(byte);
    b.write('A two b 1000\nA thr');
    b.write('ee b 1000\n');
    c.write('A one c 0\n');
    expect(await a.readLine()).toMatch(/^A \d+ a one$/);
    expect(await b.readLine()).toMatch(/^A \d+ b two$/);
    expect(await b.readLine()).toMatch(/^A \d+ b three$/);
    expect(await c.readLine()).toMatch(/^T c one$/); // held by a: refused at once, as sent after a's
    expect(adopted).toBe(3); // each served connection was read through onread
    for (const socket of sockets) socket.socket.destroy();
  } finally {
    await server.close();
  }
});
