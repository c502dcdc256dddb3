// The independent safety checker of the torture suite. It imports nothing from the lease: it reads
// what happened — every worker's append-only log, the nemesis log (spawns, SIGKILLs, SIGSTOP /
// SIGCONT, exits, each with the time it was sent) and the fenced resource's log of accepted writes
// — and decides whether the lease kept its promises:
//
//   P1 no two live holders of one id at once. A holder counts from its grant until its expiry, its
//      release or its death, whichever comes first (see "Intervals" below).
//   P2 tokens strictly increase with every takeover and never change on renew; the record never
//      goes backwards (a loss names a greater token; the final record is the greatest token).
//   P3 the fenced resource never accepted a write carrying a stale token (lower than one it had
//      already accepted), every accepted token was really granted to the writer, and no writer
//      was fenced out while its own lease was still valid (that would mean a newer token was in
//      use while this one was live: two holders at once, seen through the resource).
//   P4 every grant's token is unique per id: no token is issued twice (to two processes, or again
//      after its generation ended).
//   ERR no unexpected error: a worker never saw anything but ELEASEHELD / ELEASETIMEOUT (a corrupt
//      record, an I/O error, a crash would show up here) and never exited unless told to.
//
// Intervals, and why they are sound (never report a violation that did not happen). All times are
// wall-clock epoch milliseconds from processes on one host (one clock). The lease takes a record
// over only when `now >= expiry` (expired), the holder's .live flock is gone (died), or the record
// is a tombstone (released). So for every generation (one id, one token, one process):
//   - a segment starts at `at`, logged AFTER the acquire/renew returned (the commit is before it);
//   - it ends at the expiry the grant returned (a successor's own `now`, and so its `at`, is >= it);
//   - a renew that returned before the current segment's end extends it (it committed while the
//     record still named us, so nobody took over in between); a renew that returned after it (a
//     reclaim after a suspension, or a renew that was slow to return) opens a NEW segment at its
//     `at` — the gap in between is not counted, which can only hide a violation, never invent one;
//   - a release ends it at the release's `begin` (the tombstone or hand-off is written after that),
//     also one cut short by a kill (the worker logs `releasing` before it calls release);
//   - a death ends it at the kill time the parent logged BEFORE sending SIGKILL (the kernel drops
//     the flock only after that), or at the worker's own `exit` event (logged before it exits).
// A suspended (SIGSTOPped) holder stays a holder until its expiry: suspension ends nothing.
// Overlaps are strict: segments [s1, e1) and [s2, e2) of two generations collide iff
// max(s1, s2) < min(e1, e2).
//
// Takeover order (P2) is judged only where it is known: if generation A's acquire returned before
// B's began (A.at < B.begin), A committed first, so A.token < B.token is required.
//
// What is NOT a violation (and is counted instead): a holder suspended past its expiry that wakes
// and writes — fenced out (`staleRejected`) if a successor has already written, or accepted
// (`lateAccepted`) if no greater token has reached the resource yet; that window is inherent to
// fencing (the resource can only reject a token lower than one it has seen).

const MAX_LISTED = 25; // violations listed per property; all of them are counted

/** Reads a worker log / nemesis log / resource log: JSON lines. */
export function parseLines(text, source = 'log') {
  const out = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (line === '') continue;
    try {
      out.push(JSON.parse(line));
    } catch (error) {
      throw new Error(`${source}:${i + 1}: not a JSON line (${error.message}): ${line.slice(0, 200)}`, {
        cause: error,
      });
    }
  }
  return out;
}

function percentile(sorted, p) {
  if (sorted.length === 0) return undefined;
  const index = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[index];
}

class Violations {
  constructor() {
    this.byProperty = { P1: 0, P2: 0, P3: 0, P4: 0, ERR: 0 };
    this.list = [];
    this.listedPer = { P1: 0, P2: 0, P3: 0, P4: 0, ERR: 0 };
  }
  add(property, message, detail = {}) {
    this.byProperty[property]++;
    if (this.listedPer[property]++ < MAX_LISTED) this.list.push({ property, message, ...detail });
  }
  get total() {
    return Object.values(this.byProperty).reduce((a, b) => a + b, 0);
  }
}

const key = (id, token) => `${id}\u0000${token}`;

/**
 * Checks a history.
 * @param {import('./checker.d.mts').History} history
 * @returns {import('./checker.d.mts').CheckResult}
 */
export function check(history) {
  const v = new Violations();
  const figures = {
    processes: 0,
    transitions: 0,
    acquires: 0,
    takeovers: 0,
    refreshes: 0,
    renews: 0,
    reclaims: 0,
    releases: 0,
    losses: 0,
    kills: 0,
    suspensions: 0,
    writesAccepted: 0,
    writesRejected: 0,
    staleRejected: 0,
    lateAccepted: 0,
    killTakeovers: 0,
    handoffs: 0,
    killTakeoverP50Ms: undefined,
    killTakeoverP99Ms: undefined,
    violations: 0,
  };

  // ---- deaths and suspensions from the nemesis log
  const deathAt = new Map(); // pid → the earliest time it may have died
  const exitedUnexpectedly = new Map();
  const killTimes = [];
  for (const e of history.nemesis) {
    if (e.ev === 'kill') {
      figures.kills++;
      killTimes.push(e);
      if (!deathAt.has(e.pid) || deathAt.get(e.pid) > e.at) deathAt.set(e.pid, e.at);
    } else if (e.ev === 'stop') {
      figures.suspensions++;
    } else if (e.ev === 'exit') {
      const killed = history.nemesis.some((k) => k.ev === 'kill' && k.pid === e.pid);
      if (!killed && (e.code !== 0 || e.signal)) exitedUnexpectedly.set(e.pid, e);
    }
  }
  for (const [pid, e] of exitedUnexpectedly) {
    v.add('ERR', `worker ${pid} exited unexpectedly (code ${e.code}, signal ${e.signal})`, { pid, stderr: e.stderr });
    if (!deathAt.has(pid) || deathAt.get(pid) > e.at) deathAt.set(pid, e.at);
  }

  // ---- generations from the worker logs
  /** key(id, token) → generation */
  const gens = new Map();
  /** id → generations, in log order of their first grant */
  const gensById = new Map();
  const writes = [];
  const pids = new Set();

  for (const worker of history.workers) {
    const pid = worker.pid;
    pids.add(pid);
    /** id → this process's current generation (held or abandoned) */
    const current = new Map();
    const death = () => deathAt.get(pid);
    for (const e of worker.events) {
      switch (e.ev) {
        case 'exit': {
          if (!deathAt.has(pid) || deathAt.get(pid) > e.at) deathAt.set(pid, e.at);
          break;
        }
        case 'acquire': {
          figures.acquires++;
          figures.transitions++;
          if (e.handoff) figures.handoffs++;
          const token = BigInt(e.token);
          const k = key(e.id, token);
          const existing = gens.get(k);
          const mine = current.get(e.id);
          if (existing !== undefined && mine === existing && existing.pid === pid && existing.owner === e.owner) {
            // Same owner, same process, the generation it still holds: a refresh, not a new grant.
            figures.refreshes++;
            extend(existing, e, e.expiry);
            existing.status = 'held';
            break;
          }
          if (existing !== undefined) {
            v.add(
              'P4',
              `token ${token} of ${e.id} was granted twice: to pid ${existing.pid} (${existing.owner}) at ${existing.at} and to pid ${pid} (${e.owner}) at ${e.at}`,
              {
                id: e.id,
                token: String(token),
              },
            );
            break;
          }
          if (mine !== undefined && mine.status !== 'ended') mine.status = 'ended'; // the lease closed its predecessor
          const gen = {
            id: e.id,
            token,
            pid,
            owner: e.owner,
            begin: e.begin,
            at: e.at,
            segments: [[e.at, e.expiry]],
            status: 'held',
          };
          gens.set(k, gen);
          if (!gensById.has(e.id)) gensById.set(e.id, []);
          gensById.get(e.id).push(gen);
          current.set(e.id, gen);
          figures.takeovers++;
          break;
        }
        case 'renew': {
          figures.renews++;
          figures.transitions++;
          const gen = current.get(e.id);
          const token = BigInt(e.token);
          if (gen === undefined || gen.status !== 'held') {
            v.add('ERR', `pid ${pid} renewed ${e.id} (token ${token}) without holding it`, { pid, id: e.id });
            break;
          }
          if (gen.token !== token || (e.held !== undefined && BigInt(e.held) !== token)) {
            v.add('P2', `renew changed the token of ${e.id}: held ${gen.token}, renew returned ${token} (pid ${pid})`, {
              pid,
              id: e.id,
            });
            break;
          }
          const last = gen.segments[gen.segments.length - 1];
          if (e.begin >= last[1]) figures.reclaims++;
          extend(gen, e, e.expiry);
          break;
        }
        case 'releasing': {
          // The holder stops here, whether the release then completes, fails or is cut short.
          const gen = current.get(e.id);
          if (gen !== undefined) endBy(gen, e.begin);
          break;
        }
        case 'release':
        case 'release-failed': {
          const gen = current.get(e.id);
          if (e.ev === 'release') {
            figures.releases++;
            figures.transitions++;
          }
          if (gen === undefined) break;
          endBy(gen, e.begin);
          gen.status = e.ev === 'release' ? 'ended' : 'abandoned';
          if (e.ev === 'release') current.delete(e.id);
          break;
        }
        case 'loss': {
          figures.losses++;
          const gen = current.get(e.id);
          current.delete(e.id);
          if (gen === undefined) break;
          gen.status = 'ended';
          gen.lostAt = e;
          break;
        }
        case 'write': {
          if (e.accepted) figures.writesAccepted++;
          else figures.writesRejected++;
          writes.push({ pid, ...e });
          break;
        }
        case 'error': {
          v.add('ERR', `pid ${pid}: unexpected ${e.code ?? 'error'} from ${e.op} on ${e.id}: ${e.message}`, {
            pid,
            id: e.id,
            code: e.code,
          });
          break;
        }
        default:
          break; // start, stats, acquire-failed, renew-failed: informative only
      }
    }
    // Clip to this process's death (kill time, or its own exit record).
    const dies = death();
    if (dies !== undefined) {
      for (const gen of gens.values()) {
        if (gen.pid !== pid) continue;
        endBy(gen, dies);
      }
    }
  }
  figures.processes = pids.size;

  // A loss may name the generation's own record when that record no longer holds it: released (a
  // tombstone), or expired by the loss (a same-owner re-acquire after the expiry, refused because
  // the lease is reserved for a queued waiter). Anything else with a token not above ours went back.
  const ownRecordEnded = (gen, loss) =>
    BigInt(loss.holder.token) === gen.token &&
    (loss.holder.owner === '' || (loss.holder.expiry !== undefined && loss.holder.expiry <= loss.at));

  // Losses are checked once every interval is final.
  for (const gen of gens.values()) {
    const loss = gen.lostAt;
    if (loss === undefined) continue;
    // The renew read a changed record at some instant before it returned (`at`). If our lease was
    // still valid at `at`, somebody replaced the record of a live, unexpired, unreleased holder.
    // (Not `begin`: the renew may have waited for the transition lock past our expiry.)
    if (validAt(gen, loss.at)) {
      v.add(
        'P1',
        `pid ${gen.pid} lost ${gen.id} (token ${gen.token}) at ${loss.at} while its lease was still valid (until ${segmentEnd(gen, loss.at)})`,
        {
          id: gen.id,
          token: String(gen.token),
        },
      );
    }
    if (loss.holder === undefined || loss.holder === null) {
      v.add('P2', `pid ${gen.pid} lost ${gen.id} (token ${gen.token}): the record vanished`, { id: gen.id });
    } else if (BigInt(loss.holder.token) <= gen.token && !ownRecordEnded(gen, loss)) {
      v.add(
        'P2',
        `pid ${gen.pid} lost ${gen.id} (token ${gen.token}) to a record with token ${loss.holder.token}: the record went backwards`,
        { id: gen.id },
      );
    }
  }

  // ---- P1: no two generations of one id valid at once
  for (const [id, list] of gensById) {
    const segments = [];
    for (const gen of list) for (const [s, e] of gen.segments) if (s < e) segments.push({ s, e, gen });
    segments.sort((a, b) => a.s - b.s || a.e - b.e);
    let active = [];
    for (const seg of segments) {
      active = active.filter((a) => a.e > seg.s);
      for (const other of active) {
        if (other.gen === seg.gen) continue;
        v.add(
          'P1',
          `two holders of ${id} at once: token ${other.gen.token} (pid ${other.gen.pid}) held [${other.s}, ${other.e}) and token ${seg.gen.token} (pid ${seg.gen.pid}) held [${seg.s}, ${seg.e})`,
          { id, overlapMs: Math.min(other.e, seg.e) - seg.s },
        );
      }
      active.push(seg);
    }
  }

  // ---- P2: a takeover known to come later has a greater token
  for (const [id, list] of gensById) {
    const byAt = [...list].sort((a, b) => a.at - b.at);
    const byBegin = [...list].sort((a, b) => a.begin - b.begin);
    let i = 0;
    let max;
    for (const gen of byBegin) {
      while (i < byAt.length && byAt[i].at < gen.begin) {
        if (max === undefined || byAt[i].token > max.token) max = byAt[i];
        i++;
      }
      if (max !== undefined && max.token >= gen.token) {
        v.add(
          'P2',
          `token of ${id} did not increase: token ${gen.token} (pid ${gen.pid}, acquire began ${gen.begin}) came after token ${max.token} (pid ${max.pid}, granted ${max.at})`,
          {
            id,
          },
        );
      }
    }
    const record = history.records?.[id];
    if (record !== undefined && list.length > 0) {
      const greatest = list.reduce((m, g) => (g.token > m ? g.token : m), 0n);
      if (BigInt(record.token) < greatest) {
        v.add('P2', `the final record of ${id} has token ${record.token}, lower than the granted ${greatest}`, { id });
      }
    }
  }

  // ---- P3: the fenced resource
  const accepted = new Map(); // pid:id:seq → entry
  for (const [id, entries] of Object.entries(history.resource ?? {})) {
    let max;
    for (const entry of entries) {
      const token = BigInt(entry.token);
      if (max !== undefined && token < max) {
        v.add(
          'P3',
          `the resource accepted a stale write on ${id}: token ${token} (pid ${entry.pid}) after token ${max} had been accepted`,
          { id },
        );
      }
      if (max === undefined || token > max) max = token;
      const gen = gens.get(key(id, token));
      if (gen === undefined || gen.pid !== entry.pid) {
        v.add(
          'P3',
          `the resource accepted token ${token} on ${id} from pid ${entry.pid}, but no grant gave that process that token`,
          { id },
        );
      }
      accepted.set(`${entry.pid}:${id}:${entry.seq}`, entry);
    }
  }
  for (const w of writes) {
    const gen = gens.get(key(w.id, BigInt(w.token)));
    const valid = gen !== undefined && validAt(gen, w.at);
    if (w.accepted) {
      if (!accepted.has(`${w.pid}:${w.id}:${w.seq}`)) {
        v.add('P3', `pid ${w.pid}'s write #${w.seq} on ${w.id} was reported accepted but is not in the resource log`, {
          id: w.id,
        });
      }
      if (!valid) figures.lateAccepted++;
    } else {
      if (w.max !== undefined && BigInt(w.max) <= BigInt(w.token)) {
        v.add(
          'P3',
          `pid ${w.pid}'s write on ${w.id} (token ${w.token}) was rejected though the highest token seen was ${w.max}`,
          { id: w.id },
        );
      }
      if (valid) {
        v.add(
          'P3',
          `pid ${w.pid} was fenced out of ${w.id} at ${w.at} (token ${w.token} < ${w.max}) while its lease was still valid (until ${segmentEnd(gen, w.at)}): two holders at once`,
          {
            id: w.id,
          },
        );
      } else figures.staleRejected++;
    }
  }

  // ---- kill → next grant of an id the killed process validly held
  const latencies = [];
  for (const kill of killTimes) {
    for (const gen of gens.values()) {
      if (gen.pid !== kill.pid || !validAt(gen, kill.at - 0.5)) continue;
      const next = (gensById.get(gen.id) ?? [])
        .filter((g) => g.at >= kill.at && g !== gen)
        .sort((a, b) => a.at - b.at)[0];
      if (next !== undefined) latencies.push(next.at - kill.at);
    }
  }
  latencies.sort((a, b) => a - b);
  figures.killTakeovers = latencies.length;
  figures.killTakeoverP50Ms = percentile(latencies, 50);
  figures.killTakeoverP99Ms = percentile(latencies, 99);

  figures.violations = v.total;
  return { ok: v.total === 0, figures, violations: v.list, byProperty: v.byProperty };
}

/** A renew (or refresh) that returned at `e.at` with a new expiry. */
function extend(gen, e, expiry) {
  const last = gen.segments[gen.segments.length - 1];
  if (last !== undefined && e.at <= last[1]) last[1] = Math.max(last[1], expiry);
  else gen.segments.push([e.at, expiry]);
}

/** The generation is a holder no later than `t` (a release began, or its process died). */
function endBy(gen, t) {
  for (const s of gen.segments) s[1] = Math.min(s[1], t);
}

/** Was the generation a holder at time t? */
function validAt(gen, t) {
  return gen.segments.some(([s, e]) => s <= t && t < e);
}

function segmentEnd(gen, t) {
  return gen.segments.find(([s, e]) => s <= t && t < e)?.[1];
}

/** One line of figures, for the test output and the soak. */
export function formatFigures(f) {
  const ms = (x) => (x === undefined ? '-' : `${x.toFixed(x < 10 ? 2 : 0)} ms`);
  return [
    `processes ${f.processes}`,
    `transitions ${f.transitions} (acquires ${f.acquires}: ${f.takeovers} grants (${f.handoffs} by hand-off) + ${f.refreshes} refreshes; renews ${f.renews}, reclaims ${f.reclaims}; releases ${f.releases})`,
    `losses ${f.losses}`,
    `kills ${f.kills}`,
    `suspensions ${f.suspensions}`,
    `fenced writes ${f.writesAccepted} accepted / ${f.writesRejected} rejected (stale rejected ${f.staleRejected}, late accepted ${f.lateAccepted})`,
    `kill→next grant p50 ${ms(f.killTakeoverP50Ms)} p99 ${ms(f.killTakeoverP99Ms)} (${f.killTakeovers})`,
    `violations ${f.violations}`,
  ].join(' · ');
}
