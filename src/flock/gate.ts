/**
 * The in-process gate: operations on one id run one at a time, in call order, before they contend
 * for the cross-process flock (flock locks belong to open file descriptions, so two operations of
 * one process would otherwise spin against each other).
 */
import { abortable } from '../port/abort.js';

/** One entrant's turn. Its promise is made only when a later entrant has to wait for it: most
 * operations find the gate free, and need no promise. */
class Turn {
  #left = false;
  #done: Promise<void> | undefined;
  #resolve: (() => void) | undefined;

  get left(): boolean {
    return this.#left;
  }

  /** Resolves once this entrant has left. */
  get done(): Promise<void> {
    if (this.#left) return Promise.resolve();
    return (this.#done ??= new Promise<void>((resolve) => (this.#resolve = resolve)));
  }

  leave(): void {
    this.#left = true;
    this.#resolve?.();
  }
}

/** Keys kept after their last turn left, at most: V8 reallocates a Map's table each time it
 * empties, which a gate emptied at the end of every operation would do once per operation. */
const LEFT_KEPT = 64;

export class KeyedGate {
  /** key → the last entrant's turn; entrants wait for the one before them, so in call order. A key
   * whose last turn has left stays until LEFT_KEPT of them are kept. */
  readonly #last = new Map<string, Turn>();
  /** Keys whose last turn has not left. */
  #busy = 0;

  /** `leave` at once when nobody is in or queued for `key`, else `undefined` (then `enter`). */
  tryEnter(key: string): (() => void) | undefined {
    const previous = this.#last.get(key);
    return previous?.left === false ? undefined : this.#join(key, previous);
  }

  /** Nobody is in or queued for `key`: enough for a section that never yields to the event loop,
   * which nobody can enter before it ends. */
  isFree(key: string): boolean {
    return this.#last.get(key)?.left !== false;
  }

  /** Resolves to `leave` once every earlier entrant for `key` has left. */
  async enter(key: string, signal?: AbortSignal): Promise<() => void> {
    const previous = this.#last.get(key);
    const leave = this.#join(key, previous);
    if (previous !== undefined && !previous.left) {
      try {
        await abortable(previous.done, signal);
      } catch (error) {
        // Abandoned while queued: our turn still passes through, in order, once the earlier one leaves.
        void previous.done.then(leave);
        throw error;
      }
    }
    return leave;
  }

  /** Ids with an operation running or queued. */
  get size(): number {
    return this.#busy;
  }

  /** Becomes the last entrant for `key`, after `previous` (the key's last turn until now): its `leave`. */
  #join(key: string, previous: Turn | undefined): () => void {
    if (previous === undefined && this.#last.size - this.#busy >= LEFT_KEPT) {
      for (const [kept, turn] of this.#last) if (turn.left) this.#last.delete(kept);
    }
    if (previous === undefined || previous.left) this.#busy++;
    const turn = new Turn();
    this.#last.set(key, turn);
    return () => {
      turn.leave();
      if (this.#last.get(key) === turn) this.#busy--;
    };
  }
}
