/** The commit window's rules, sans I/O: no two batches in flight on one key, replies in send order,
 * and no token in a txn above the committed reservation unless the txn carries the mark. */
import { describe, expect, it } from 'vitest';
import { TOKEN_RESERVE_MS } from '#kernel';
import { CommitWindow } from '../../src/cluster/pipeline.js';
import type { HeldReply } from '../../src/server/cluster-host.js';

const WALL_MS = 1_700_000_000_000;
const WALL_US = BigInt(WALL_MS) * 1000n;
const RESERVE = BigInt(TOKEN_RESERVE_MS) * 1000n;
const reply = (line: string): HeldReply => ({ session: 1, line, grant: undefined });
const lines = (batches: ReadonlyArray<{ replies: HeldReply[] }>): string[] =>
  batches.flatMap((batch) => batch.replies.map((r) => r.line));

/** A window whose reservation is already committed well ahead (no mark in the next batches). */
function reserved(size: number): CommitWindow {
  return new CommitWindow(size, WALL_US + RESERVE);
}

describe('CommitWindow', () => {
  it('holds nothing to send while empty, and is idle', () => {
    const window = reserved(4);
    expect(window.idle).toBe(true);
    expect(window.take(WALL_US, WALL_MS)).toBeUndefined();
  });

  it('sends disjoint batches side by side up to its size, then waits for a commit', () => {
    const window = reserved(2);
    window.grant('a', WALL_US + 1n);
    const first = window.take(WALL_US + 1n, WALL_MS)!;
    window.grant('b', WALL_US + 2n);
    const second = window.take(WALL_US + 2n, WALL_MS)!;
    expect([...first.touched, ...second.touched]).toEqual(['a', 'b']);
    window.grant('c', WALL_US + 3n);
    expect(window.take(WALL_US + 3n, WALL_MS)).toBeUndefined();
    expect(window.inFlight).toBe(2);
    window.committed(first);
    expect([...window.take(WALL_US + 3n, WALL_MS)!.touched]).toEqual(['c']);
  });

  it('never has two batches in flight on one key: the later waits for the earlier commit', () => {
    const window = reserved(4);
    window.grant('k', WALL_US + 1n);
    const first = window.take(WALL_US + 1n, WALL_MS)!;
    window.touch('k'); // released while the grant is in flight
    window.grant('other', WALL_US + 2n);
    expect(window.take(WALL_US + 2n, WALL_MS)).toBeUndefined();
    window.committed(first);
    const second = window.take(WALL_US + 2n, WALL_MS)!;
    expect([...second.touched].sort()).toEqual(['k', 'other']);
  });

  it('delivers replies in send order, whatever order the commits come back in', () => {
    const window = reserved(3);
    const sent = ['a', 'b', 'c'].map((key) => {
      window.touch(key);
      window.hold(reply(`R 1 ${key}`));
      return window.take(WALL_US, WALL_MS)!;
    });
    expect(window.committed(sent[2]!)).toEqual([]);
    expect(window.committed(sent[1]!)).toEqual([]);
    expect(lines(window.committed(sent[0]!))).toEqual(['R 1 a', 'R 1 b', 'R 1 c']);
    expect(window.idle).toBe(true);
  });

  it('a batch of replies only (no writes) still goes out, in order', () => {
    const window = reserved(2);
    window.hold(reply('N 5 k'));
    const batch = window.take(WALL_US, WALL_MS)!;
    expect(batch.touched.size).toBe(0);
    expect(lines(window.committed(batch))).toEqual(['N 5 k']);
  });

  it('reserves tokens ahead in the first batch of a term, and not again while half is left', () => {
    const window = new CommitWindow(4, 0n);
    window.grant('a', WALL_US);
    const first = window.take(WALL_US, WALL_MS)!;
    expect(first.mark).toBe(WALL_US + RESERVE);
    window.committed(first);
    window.grant('b', WALL_US + 1n);
    expect(window.take(WALL_US + 1n, WALL_MS)!.mark).toBeUndefined();
  });

  it('a token above the committed mark never goes out beside the mark in flight, only after it', () => {
    const window = new CommitWindow(4, WALL_US);
    window.grant('a', WALL_US + 1n);
    const carrier = window.take(WALL_US + 1n, WALL_MS)!;
    expect(carrier.mark).toBe(WALL_US + 1n + RESERVE);
    window.grant('b', WALL_US + 2n);
    expect(window.take(WALL_US + 2n, WALL_MS)).toBeUndefined();
    window.committed(carrier);
    const after = window.take(WALL_US + 2n, WALL_MS)!;
    expect(after.mark).toBeUndefined();
    expect([...after.touched]).toEqual(['b']);
  });

  it('tops the reservation up when half is used, one mark in flight at a time', () => {
    const window = new CommitWindow(4, WALL_US + RESERVE);
    const late = WALL_MS + TOKEN_RESERVE_MS / 2 + 1; // the clock moved past half the reservation
    window.touch('a');
    const topUp = window.take(WALL_US, late)!;
    expect(topUp.mark).toBe(BigInt(late) * 1000n + RESERVE);
    window.touch('b');
    const beside = window.take(WALL_US, late)!; // covered by the committed mark: may go beside it
    expect(beside.mark).toBeUndefined();
  });
});
