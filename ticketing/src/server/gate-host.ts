/** The host a cluster gate drives the server through (cluster-host.ts `GateHost`). */
import type { CommandApplier } from './applier.js';
import type { GateHost } from './cluster-host.js';
import type { Closer } from './closer.js';
import type { OpenConnections } from './connection.js';
import type { DeadlineTimer } from './deadline-timer.js';
import { OBSERVED_CHANGE, type Observers } from './observers.js';
import type { Outbox } from './replies.js';

export interface GateHostParts {
  readonly clock: () => number;
  /** Closes the server and reports the error (its `'error'` event). */
  readonly fatal: (error: Error) => void;
  readonly applier: CommandApplier;
  readonly open: OpenConnections;
  readonly closer: Closer;
  readonly outbox: Outbox;
  readonly deadlines: DeadlineTimer;
  readonly observers: Pick<Observers, 'reset' | 'deliverHeld'>;
}

export function createGateHost(parts: GateHostParts): GateHost {
  const { applier, open, closer, outbox, deadlines, observers } = parts;
  return {
    now: parts.clock,
    fail: (error) => parts.fatal(error),
    setState: (state, detail = 'leadership lost') => {
      const previous = applier.state;
      applier.state = state;
      deadlines.clear();
      if (previous !== undefined) {
        // What was queued or held there is lost: close those connections (their clients see
        // Indeterminate) rather than leave them waiting for replies that will never come.
        for (const conn of open.values()) {
          if (!conn.fresh) closer.fail(conn, 'not_active', detail, 'not_active');
        }
      }
      observers.reset(); // those that observed were among them; the new state watches nothing
      deadlines.afterEvent();
    },
    deliver: (replies) => {
      for (const { session, line, grant } of replies) {
        if (session === OBSERVED_CHANGE) {
          observers.deliverHeld(line);
          continue;
        }
        const conn = open.get(session);
        if (conn !== undefined && !conn.closing && conn.socket.writable) outbox.send(conn, line);
        else if (grant !== undefined) applier.apply(applier.undeliverable(session, grant.key, grant.token));
      }
      deadlines.afterEvent();
    },
    apply: (command) => {
      applier.apply(command);
      deadlines.afterEvent();
    },
    broadcast: (line) => {
      for (const conn of open.values()) if (!conn.closing) outbox.send(conn, line);
      outbox.flush();
    },
  };
}
