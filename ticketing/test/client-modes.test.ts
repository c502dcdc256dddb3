/** The client's modes against a real server: permits with slots, shared holds, the C reply as a
 * ModeConflictError, option checks, hold() and TicketLease with modes. */
import { afterEach, expect, test } from 'vitest';
import { TicketClient } from '../src/client.js';
import { IndeterminateError, ModeConflictError } from '../src/errors.js';
import { TicketLease } from '../src/ticket-lease.js';
import { startServer } from './helpers.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

async function clientOf(options: Parameters<typeof startServer>[0] = {}): Promise<TicketClient> {
  const server = await startServer(options);
  cleanups.push(server.close);
  const client = new TicketClient({ port: server.port });
  cleanups.push(() => client.destroy());
  return client;
}

test('permits: each grant has the lowest free slot; a freed slot is reused', async () => {
  const client = await clientOf();
  const a = await client.acquire('gpu', { permits: 2 });
  const b = await client.acquire('gpu', { permits: 2 });
  expect(a).toMatchObject({ status: 'acquired', slot: 0 });
  expect(b).toMatchObject({ status: 'acquired', slot: 1 });
  expect(await client.acquire('gpu', { permits: 2 })).toMatchObject({ status: 'timed-out' });
  if (a.status !== 'acquired' || b.status !== 'acquired') throw new Error('not acquired');
  await client.release('gpu', a.token);
  const c = await client.acquire('gpu', { permits: 2 });
  expect(c).toMatchObject({ status: 'acquired', slot: 0 });
  if (c.status === 'acquired') expect(c.token).toBeGreaterThan(b.token);
});

test('shared: many at once; an exclusive acquire waits; x grants carry no slot', async () => {
  const client = await clientOf();
  const r1 = await client.acquire('data', { shared: true });
  const r2 = await client.acquire('data', { shared: true });
  expect([r1.status, r2.status]).toEqual(['acquired', 'acquired']);
  expect(await client.acquire('data')).toMatchObject({ status: 'timed-out' });
  expect(await client.acquire('other')).not.toHaveProperty('slot', expect.anything());
});

test('a mode that does not fit rejects with ModeConflictError at once, not Indeterminate; the connection goes on', async () => {
  const client = await clientOf();
  await client.acquire('sem', { permits: 3 });
  const error: unknown = await client.acquire('sem', { permits: 4, waitMs: 60_000 }).catch((e: unknown) => e);
  expect(error).toBeInstanceOf(ModeConflictError);
  expect(error).not.toBeInstanceOf(IndeterminateError);
  expect(error).toMatchObject({ code: 'ETICKETMODECONFLICT', key: 'sem' });
  await expect(client.acquire('sem', { shared: true })).rejects.toBeInstanceOf(ModeConflictError);
  expect(await client.acquire('sem', { permits: 3 })).toMatchObject({ status: 'acquired', slot: 1 });
});

test('bad mode options are refused before sending', async () => {
  const client = await clientOf();
  await expect(client.acquire('k', { permits: 0 })).rejects.toThrow(RangeError);
  await expect(client.acquire('k', { permits: 65536 })).rejects.toThrow(RangeError);
  await expect(client.acquire('k', { permits: 1.5 })).rejects.toThrow(RangeError);
  await expect(client.acquire('k', { permits: '2' as never })).rejects.toThrow(TypeError);
  await expect(client.acquire('k', { shared: 'yes' as never })).rejects.toThrow(TypeError);
  await expect(client.acquire('k', { permits: 2, shared: true })).rejects.toThrow(TypeError);
});

test('hold() and TicketLease take permits and report the slot', async () => {
  const client = await clientOf();
  const hold = await client.hold('pool', { permits: 3 });
  cleanups.push(() => void hold.release());
  expect(hold.slot).toBe(0);
  const lease = new TicketLease(client);
  const grant = await lease.acquire('pool', 'worker', { permits: 3 });
  expect(grant.slot).toBe(1);
  expect((await lease.renew(grant)).slot).toBe(1);
  await lease.release(grant);
  const shared = await client.hold('doc', { shared: true });
  expect(shared.slot).toBeUndefined();
  await shared.release();
});
