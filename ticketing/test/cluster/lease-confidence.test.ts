/** The leader's lease confidence, sans I/O: what proves the etcd lease alive and until when, on a
 * fake monotonic clock. The node serves, sends and delivers only while `confirmed` holds. */
import { describe, expect, it } from 'vitest';
import { LeaseConfidence } from '../../src/cluster/lease-confidence.js';

const TTL_MS = 2_000;
const MARGIN_MS = 500; // min(ttl/4, 1 s)

/** A confidence on a clock the test moves. */
function setup(ttlMs = TTL_MS): { confidence: LeaseConfidence; at: (ms: number) => LeaseConfidence } {
  let now = 0;
  const confidence = new LeaseConfidence(ttlMs, () => now);
  return {
    confidence,
    at: (ms) => {
      now = ms;
      return confidence;
    },
  };
}

describe('LeaseConfidence', () => {
  it('confirms nothing before etcd grants the lease, and says it is starting', () => {
    const { confidence, at } = setup();
    confidence.requested();
    expect(at(0).confirmed).toBe(false);
    expect(confidence.everConfirmed).toBe(false);
  });

  it('counts a grant from when it was requested, not from when the answer came', () => {
    const { confidence, at } = setup();
    const requestedAt = at(1_000).requested();
    at(1_400).granted(requestedAt); // the answer took 400 ms
    expect(confidence.everConfirmed).toBe(true);
    // requested at 1000: alive until 3000 at least; relied on until 3000 − 500.
    expect(at(2_499).confirmed).toBe(true);
    expect(at(2_500).confirmed).toBe(false);
  });

  it('stops relying on the lease min(ttl/4, 1 s) before its proven end', () => {
    expect(new LeaseConfidence(1_000).marginMs).toBe(250);
    expect(new LeaseConfidence(TTL_MS).marginMs).toBe(MARGIN_MS);
    expect(new LeaseConfidence(4_000).marginMs).toBe(1_000);
    expect(new LeaseConfidence(60_000).marginMs).toBe(1_000);
  });

  it('counts an answered keepalive from when it was sent', () => {
    const { confidence, at } = setup();
    confidence.granted(at(0).requested());
    at(1_000).keepaliveSent();
    at(1_700).keepaliveAnswered(); // a slow answer proves the lease from 1000, not 1700
    expect(at(2_499).confirmed).toBe(true);
    expect(at(2_500).confirmed).toBe(false);
  });

  it('pairs answers with sends oldest first', () => {
    const { confidence, at } = setup();
    confidence.granted(at(0).requested());
    at(600).keepaliveSent();
    at(1_200).keepaliveSent();
    at(1_300).keepaliveAnswered(); // the answer to the keepalive sent at 600
    expect(at(2_099).confirmed).toBe(true);
    expect(at(2_100).confirmed).toBe(false);
    at(2_200).keepaliveAnswered(); // to the one sent at 1200: sure again, until 1200 + 2000 − 500
    expect(confidence.confirmed).toBe(true);
    expect(at(2_699).confirmed).toBe(true);
    expect(at(2_700).confirmed).toBe(false);
  });

  it('forgets the sends of a failed keepalive: a later answer proves nothing by them', () => {
    const { confidence, at } = setup();
    confidence.granted(at(0).requested());
    at(1_000).keepaliveSent();
    at(1_100).keepaliveFailed();
    at(1_200).keepaliveAnswered();
    expect(at(1_500).confirmed).toBe(false);
  });

  it('never moves the proven end back', () => {
    const { confidence, at } = setup();
    confidence.granted(at(1_000).requested());
    confidence.granted(0); // a late grant answer for an older request
    expect(at(2_499).confirmed).toBe(true);
  });

  it('a process stopped past the margin resumes unconfirmed (the monotonic clock ran on)', () => {
    const { confidence, at } = setup();
    confidence.granted(at(0).requested());
    at(100).keepaliveSent();
    at(150).keepaliveAnswered();
    expect(at(200).confirmed).toBe(true);
    expect(at(200 + TTL_MS).confirmed).toBe(false); // stopped for a TTL: no confirmation came
  });

  it('a lost lease is unconfirmed at once and counts as starting again until a new grant', () => {
    const { confidence, at } = setup();
    confidence.granted(at(0).requested());
    at(100).lost();
    expect(confidence.confirmed).toBe(false);
    expect(confidence.everConfirmed).toBe(false);
    const requestedAt = at(300).requested();
    at(350).granted(requestedAt);
    expect(confidence.confirmed).toBe(true);
    expect(at(300 + TTL_MS - MARGIN_MS).confirmed).toBe(false);
  });

  it('a new lease drops the keepalives sent for the previous one', () => {
    const { confidence, at } = setup();
    confidence.granted(at(0).requested());
    at(1_000).keepaliveSent();
    at(1_100).lost();
    at(1_200).requested();
    at(1_300).keepaliveAnswered(); // the old lease's keepalive: it proves nothing about the new one
    expect(confidence.confirmed).toBe(false);
    expect(confidence.everConfirmed).toBe(false);
  });
});
