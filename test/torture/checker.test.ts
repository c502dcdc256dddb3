// The checker's own tests, on hand-made histories: the legal-but-tricky ones must pass (a holder
// suspended past its expiry, a reclaim, a late write, a slow renew, a kill at the exact instant of
// a takeover), and for every property a history that breaks it must be caught.
import { describe, expect, test } from 'vitest';
import { check, parseLines, type History, type NemesisEvent, type WorkerEvent } from './checker.mjs';

type Events = WorkerEvent[];
const A = 101;
const B = 202;
const C = 303;

const acquire = (id: string, token: number, begin: number, at: number, expiry: number, owner = 'o'): WorkerEvent => ({
  ev: 'acquire',
  id,
  token: String(token),
  owner,
  begin,
  at,
  expiry,
});
const renew = (id: string, token: number, begin: number, at: number, expiry: number, held = token): WorkerEvent => ({
  ev: 'renew',
  id,
  token: String(token),
  held: String(held),
  begin,
  at,
  expiry,
});
const release = (id: string, token: number, begin: number, at = begin + 1): WorkerEvent => ({
  ev: 'release',
  id,
  token: String(token),
  begin,
  at,
});
const releaseFailed = (id: string, token: number, begin: number, at = begin + 1): WorkerEvent => ({
  ev: 'release-failed',
  id,
  token: String(token),
  code: 'ELEASETIMEOUT',
  begin,
  at,
});
const loss = (
  id: string,
  token: number,
  begin: number,
  at: number,
  holder: { owner: string; token: number; expiry?: number } | null,
): WorkerEvent => ({
  ev: 'loss',
  id,
  token: String(token),
  begin,
  at,
  holder: holder && { owner: holder.owner, token: String(holder.token), expiry: holder.expiry },
});
let seq = 0;
const write = (id: string, token: number, at: number, accepted: boolean, max?: number): WorkerEvent => ({
  ev: 'write',
  id,
  token: String(token),
  seq: ++seq,
  at,
  accepted,
  max: max === undefined ? undefined : String(max),
});
const kill = (pid: number, at: number): NemesisEvent => ({ ev: 'kill', pid, at });
const stop = (pid: number, at: number): NemesisEvent => ({ ev: 'stop', pid, at });
const cont = (pid: number, at: number): NemesisEvent => ({ ev: 'cont', pid, at });

/** A history; the resource log is derived from the accepted writes (in time order) unless given. */
function history(workers: Record<number, Events>, nemesis: NemesisEvent[] = [], extra: Partial<History> = {}): History {
  const resource: NonNullable<History['resource']> = {};
  const accepted = Object.entries(workers)
    .flatMap(([pid, events]) =>
      events.filter((e) => e.ev === 'write' && e.accepted).map((e) => ({ pid: Number(pid), e })),
    )
    .sort((x, y) => x.e.at - y.e.at);
  for (const { pid, e } of accepted) {
    (resource[e.id as string] ??= []).push({ token: e.token as string, pid, seq: e.seq as number, at: e.at });
  }
  return {
    workers: Object.entries(workers).map(([pid, events]) => ({ pid: Number(pid), events })),
    nemesis,
    resource,
    ...extra,
  };
}

const only = (h: History) => {
  const result = check(h);
  return {
    ...result,
    properties: Object.entries(result.byProperty)
      .filter(([, n]) => n > 0)
      .map(([p]) => p),
  };
};

describe('legal histories pass', () => {
  test('a clean hand-over: renew, release, then a successor with a greater token', () => {
    const r = only(
      history({
        [A]: [
          acquire('s', 10, 0, 1, 301),
          write('s', 10, 2, true),
          renew('s', 10, 100, 101, 401),
          write('s', 10, 150, true, 10),
          release('s', 10, 200),
        ],
        [B]: [acquire('s', 20, 150, 201, 501), write('s', 20, 202, true, 10), release('s', 20, 300)],
      }),
    );
    expect(r.violations).toEqual([]);
    expect(r.figures).toMatchObject({
      processes: 2,
      transitions: 5,
      takeovers: 2,
      renews: 1,
      releases: 2,
      writesAccepted: 3,
      violations: 0,
    });
  });

  test('crash takeover: the successor is granted after the kill was sent (even at the same millisecond)', () => {
    const r = only(
      history({ [A]: [acquire('s', 10, 0, 1, 10_000)], [B]: [acquire('s', 20, 40, 50, 10_050)] }, [kill(A, 50)]),
    );
    expect(r.violations).toEqual([]);
    expect(r.figures).toMatchObject({ kills: 1, killTakeovers: 1, killTakeoverP50Ms: 0 });
  });

  test('a holder suspended past its expiry: the successor takes over after it, the sleeper is fenced out and loses', () => {
    const r = only(
      history(
        {
          [A]: [
            acquire('s', 10, 0, 1, 300),
            write('s', 10, 50, true),
            write('s', 10, 700, false, 20),
            loss('s', 10, 701, 702, { owner: 'b', token: 20 }),
          ],
          [B]: [acquire('s', 20, 290, 305, 605, 'b'), write('s', 20, 306, true, 10)],
        },
        [stop(A, 100), cont(A, 699)],
      ),
    );
    expect(r.violations).toEqual([]);
    expect(r.figures).toMatchObject({ suspensions: 1, losses: 1, staleRejected: 1, writesRejected: 1 });
  });

  test('a late write accepted before any greater token reached the resource is counted, not a violation', () => {
    const r = only(
      history({
        [A]: [acquire('s', 10, 0, 1, 300), write('s', 10, 650, true, 10), write('s', 10, 700, false, 20)],
        [B]: [acquire('s', 20, 300, 305, 905), write('s', 20, 660, true, 10)],
      }),
    );
    expect(r.violations).toEqual([]);
    expect(r.figures).toMatchObject({ lateAccepted: 1, staleRejected: 1 });
  });

  test('the sleep-past-TTL reclaim: renew after the expiry with nobody in between, then a successor after the new expiry', () => {
    const r = only(
      history({
        [A]: [
          acquire('s', 10, 0, 1, 300),
          renew('s', 10, 600, 601, 901),
          write('s', 10, 650, true),
          release('s', 10, 700),
        ],
        [B]: [acquire('s', 20, 690, 905, 1_205)],
      }),
    );
    expect(r.violations).toEqual([]);
    expect(r.figures.reclaims).toBe(1);
  });

  test('a renew slow to return (past the expiry it set) counts no time as held, so a successor after that expiry is fine', () => {
    const r = only(
      history({
        [A]: [acquire('s', 10, 0, 1, 300), renew('s', 10, 250, 700, 550)],
        [B]: [acquire('s', 20, 555, 560, 860)],
      }),
    );
    expect(r.violations).toEqual([]);
  });

  test('a release that timed out, then a same-owner re-acquire in the same process: a refresh, same token', () => {
    const r = only(
      history({
        [A]: [
          acquire('s', 10, 0, 1, 300, 'a'),
          releaseFailed('s', 10, 100),
          acquire('s', 10, 150, 151, 451, 'a'),
          release('s', 10, 200),
        ],
      }),
    );
    expect(r.violations).toEqual([]);
    expect(r.figures).toMatchObject({ refreshes: 1, takeovers: 1 });
  });

  test('a same-owner re-acquire while held extends the grant; one after the expiry is a new grant with a greater token', () => {
    const r = only(
      history({
        [A]: [
          acquire('s', 10, 0, 1, 300, 'a'),
          acquire('s', 10, 100, 101, 401, 'a'),
          acquire('s', 20, 500, 501, 801, 'a'),
          release('s', 20, 600),
        ],
        [B]: [acquire('s', 30, 600, 602, 902)],
      }),
    );
    expect(r.violations).toEqual([]);
    expect(r.figures).toMatchObject({ refreshes: 1, takeovers: 3 });
  });

  test('distinct ids are independent: equal tokens and overlapping holders on two ids are fine', () => {
    const r = only(history({ [A]: [acquire('s1', 10, 0, 1, 300)], [B]: [acquire('s2', 10, 0, 1, 300)] }));
    expect(r.violations).toEqual([]);
  });

  test('a worker that exits after its exit record ends its holds there', () => {
    const r = only(
      history(
        { [A]: [acquire('s', 10, 0, 1, 10_000), { ev: 'exit', at: 100 }], [B]: [acquire('s', 20, 100, 101, 10_101)] },
        [{ ev: 'exit', pid: A, at: 105, code: 0, signal: null }],
      ),
    );
    expect(r.violations).toEqual([]);
  });
});

test('a release cut short by a kill after its hand-off: the holder ends where it began to release', () => {
  // The soak once met this: the release handed the lease to a waiter, and the releaser was killed
  // before it could log `release`, so it counted as a holder until the kill.
  const releasing: WorkerEvent = { ev: 'releasing', id: 's', token: '10', begin: 200, at: 200 };
  const handedOver = acquire('s', 20, 150, 205, 505);
  const cut = history({ [A]: [acquire('s', 10, 0, 1, 300), releasing], [B]: [handedOver] }, [kill(A, 210)]);
  expect(check(cut).violations).toEqual([]);
  // Without that line it is what it looks like: a holder alive until 210, a successor at 205.
  const unannounced = history({ [A]: [acquire('s', 10, 0, 1, 300)], [B]: [handedOver] }, [kill(A, 210)]);
  expect(only(unannounced).properties).toEqual(['P1']);
});

describe('each property: a history that breaks it is caught', () => {
  test('P1: a successor granted while the holder was alive, unexpired and unreleased', () => {
    const r = only(history({ [A]: [acquire('s', 10, 0, 1, 300)], [B]: [acquire('s', 20, 90, 100, 400)] }));
    expect(r.properties).toEqual(['P1']);
    expect(r.violations[0]!.message).toMatch(/two holders of s at once/);
  });

  test('P1: a successor granted before the holder began to release', () => {
    const r = only(
      history({ [A]: [acquire('s', 10, 0, 1, 300), release('s', 10, 200)], [B]: [acquire('s', 20, 190, 199, 499)] }),
    );
    expect(r.properties).toEqual(['P1']);
  });

  test('P1: a takeover before the holder was killed', () => {
    const r = only(
      history({ [A]: [acquire('s', 10, 0, 1, 10_000)], [B]: [acquire('s', 20, 30, 40, 10_040)] }, [kill(A, 50)]),
    );
    expect(r.properties).toEqual(['P1']);
  });

  test('P1: a reclaim that succeeded although a successor had taken over', () => {
    const r = only(
      history({
        [A]: [acquire('s', 10, 0, 1, 300), renew('s', 10, 400, 401, 701)],
        [B]: [acquire('s', 20, 300, 305, 605)],
      }),
    );
    expect(r.properties).toEqual(['P1']);
  });

  test('P1: a refresh that really extended the lease: a successor inside the extension is caught', () => {
    const r = only(
      history({
        [A]: [acquire('s', 10, 0, 1, 300, 'a'), acquire('s', 10, 100, 101, 401, 'a')],
        [B]: [acquire('s', 20, 300, 350, 650)],
      }),
    );
    expect(r.properties).toEqual(['P1']);
  });

  test('P1: a renew that found the lease lost while it was still valid (even if the thief never logged)', () => {
    const r = only(history({ [A]: [acquire('s', 10, 0, 1, 300), loss('s', 10, 100, 101, { owner: 'x', token: 20 })] }));
    expect(r.properties).toEqual(['P1']);
    expect(r.violations[0]!.message).toMatch(/while its lease was still valid/);
  });

  test('P2: a renew that changed the token', () => {
    const r = only(history({ [A]: [acquire('s', 10, 0, 1, 300), renew('s', 11, 100, 101, 401, 10)] }));
    expect(r.properties).toEqual(['P2']);
  });

  test('P2: a later takeover with a lower token', () => {
    const r = only(
      history({ [A]: [acquire('s', 10, 0, 1, 300), release('s', 10, 100)], [B]: [acquire('s', 9, 200, 201, 501)] }),
    );
    expect(r.properties).toEqual(['P2']);
    expect(r.violations[0]!.message).toMatch(/did not increase/);
  });

  test('P2: a loss to a record with a lower token (the record went backwards), or to no record at all', () => {
    expect(
      only(history({ [A]: [acquire('s', 10, 0, 1, 300), loss('s', 10, 400, 401, { owner: 'x', token: 5 })] }))
        .properties,
    ).toEqual(['P2']);
    expect(only(history({ [A]: [acquire('s', 10, 0, 1, 300), loss('s', 10, 400, 401, null)] })).properties).toEqual([
      'P2',
    ]);
  });

  test('P2: a loss naming its own record is fine only once that record has ended (tombstone, or expired)', () => {
    // A same-owner re-acquire after the expiry, refused because the lease is reserved for a queued waiter.
    const expired = { owner: 'o', token: 10, expiry: 300 };
    expect(only(history({ [A]: [acquire('s', 10, 0, 1, 300), loss('s', 10, 400, 401, expired)] })).properties).toEqual(
      [],
    );
    expect(
      only(history({ [A]: [acquire('s', 10, 0, 1, 300), loss('s', 10, 400, 401, { owner: '', token: 10 })] }))
        .properties,
    ).toEqual([]);
    const unexpired = { owner: 'o', token: 10, expiry: 500 };
    expect(
      only(history({ [A]: [acquire('s', 10, 0, 1, 300), loss('s', 10, 400, 401, unexpired)] })).properties,
    ).toEqual(['P2']);
    expect(
      only(history({ [A]: [acquire('s', 10, 0, 1, 300), loss('s', 10, 400, 401, { owner: 'o', token: 10 })] }))
        .properties,
    ).toEqual(['P2']);
  });

  test('P2: a final record older than a granted token', () => {
    const r = only(history({ [A]: [acquire('s', 10, 0, 1, 300)] }, [], { records: { s: { owner: 'x', token: '9' } } }));
    expect(r.properties).toEqual(['P2']);
  });

  test('P3: the resource accepted a stale token', () => {
    const h = history({
      [A]: [acquire('s', 10, 0, 1, 300), release('s', 10, 100)],
      [B]: [acquire('s', 20, 150, 151, 451)],
    });
    h.resource = {
      s: [
        { token: '10', pid: A, seq: 1, at: 50 },
        { token: '20', pid: B, seq: 2, at: 160 },
        { token: '10', pid: A, seq: 3, at: 170 },
      ],
    };
    const r = only(h);
    expect(r.properties).toEqual(['P3']);
    expect(r.violations[0]!.message).toMatch(/accepted a stale write/);
  });

  test('P3: the resource accepted a token that no grant gave the writer', () => {
    const h = history({ [A]: [acquire('s', 10, 0, 1, 300)] });
    h.resource = { s: [{ token: '10', pid: B, seq: 1, at: 50 }] };
    expect(only(h).properties).toEqual(['P3']);
  });

  test('P3: a writer fenced out while its own lease was still valid', () => {
    const r = only(history({ [A]: [acquire('s', 10, 0, 1, 300), write('s', 10, 100, false, 20)] }));
    expect(r.properties).toEqual(['P3']);
    expect(r.violations[0]!.message).toMatch(/fenced out .* while its lease was still valid/);
  });

  test('P3: a write reported accepted that the resource has no record of', () => {
    const h = history({ [A]: [acquire('s', 10, 0, 1, 300), write('s', 10, 100, true)] });
    h.resource = {};
    expect(only(h).properties).toEqual(['P3']);
  });

  test('P4: one token granted to two processes', () => {
    const r = only(
      history({ [A]: [acquire('s', 10, 0, 1, 300), release('s', 10, 100)], [B]: [acquire('s', 10, 200, 201, 501)] }),
    );
    expect(r.properties).toContain('P4');
  });

  test('P4: a token granted again to the same process after its generation ended', () => {
    const r = only(
      history({ [A]: [acquire('s', 10, 0, 1, 300), release('s', 10, 100), acquire('s', 10, 200, 201, 501)] }),
    );
    expect(r.properties).toContain('P4');
  });

  test('ERR: an unexpected error (e.g. a corrupt record) and an unexpected exit', () => {
    const r = only(
      history(
        {
          [A]: [{ ev: 'error', op: 'acquire', id: 's', code: 'ELEASECORRUPT', message: 'bad record', at: 5 }],
          [B]: [],
        },
        [{ ev: 'exit', pid: B, at: 9, code: 1, signal: null }],
      ),
    );
    expect(r.properties).toEqual(['ERR']);
    expect(r.byProperty.ERR).toBe(2);
  });
});

test('parseLines rejects a torn line, naming where', () => {
  expect(parseLines('{"ev":"start","at":1}\n\n{"ev":"acquire","at":2}\n')).toHaveLength(2);
  expect(() => parseLines('{"ev":"start","at":1}\n{"ev":"acq', 'w1.log')).toThrow(/w1\.log:2/);
});

test('the figures count what happened', () => {
  const r = check(
    history(
      {
        [A]: [acquire('s', 10, 0, 1, 300), renew('s', 10, 100, 101, 401), release('s', 10, 150)],
        [B]: [acquire('s', 20, 160, 161, 461)],
        [C]: [acquire('t', 5, 0, 2, 302)],
      },
      [stop(C, 10), cont(C, 20), kill(B, 200)],
    ),
  );
  expect(r.figures).toMatchObject({
    processes: 3,
    transitions: 5,
    kills: 1,
    suspensions: 1,
    killTakeovers: 0,
    violations: 0,
  });
});
