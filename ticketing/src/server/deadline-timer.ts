/**
 * The one deadline timer: armed for the state machine's earliest deadline, it applies the
 * `expire` and `wait-timeout` commands that are due. Also home of the step that ends every event.
 */
import { timerDelay } from '#kernel';
import type { CommandApplier } from './applier.js';
import type { Outbox } from './replies.js';

/** Due commands applied per timer callback before yielding to I/O. */
const DUE_BATCH = 10_000;

export class DeadlineTimer {
  #timer: NodeJS.Timeout | undefined;
  #at = Infinity;
  #stopped = false;

  constructor(
    private readonly applier: CommandApplier,
    private readonly clock: () => number,
    private readonly outbox: Outbox,
  ) {}

  /**
   * The step after every event (a read resumed, a deadline due, a change from the cluster gate):
   * the replies it produced leave, and the timer is re-armed for the deadlines it moved.
   */
  afterEvent(): void {
    this.outbox.flush();
    this.schedule();
  }

  /** Arms the timer for the earliest deadline in the state machine. */
  schedule(): void {
    const next = this.applier.state?.nextDeadline();
    if (next === undefined || next >= this.#at || this.#stopped) return;
    clearTimeout(this.#timer);
    this.#at = next;
    // setTimeout turns a delay past 2^31-1 ms into 1 ms (a spin). A waiter's far deadline is never
    // the earliest (its key's lease expiry, at most 2^31-1 ms away, comes first), so this is
    // defence only; the timer re-arms if it fires early.
    const delay = timerDelay(Math.ceil(next - this.clock()));
    this.#timer = setTimeout(this.#onDeadline, delay).unref();
  }

  /** Forgets the armed deadline (the state it came from is gone). */
  clear(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#at = Infinity;
  }

  /** For good (the server is closing). */
  stop(): void {
    this.#stopped = true;
    this.clear();
  }

  readonly #onDeadline = (): void => {
    this.#timer = undefined;
    this.#at = Infinity;
    const { applier } = this;
    const state = applier.state;
    if (state === undefined) return;
    const now = this.clock();
    for (let n = 0; n < DUE_BATCH; n++) {
      const command = state.nextDue(now);
      if (command === undefined) break;
      applier.apply(command);
    }
    this.afterEvent();
  };
}
