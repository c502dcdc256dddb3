/**
 * The in-process gate: operations on one id run one at a time, in call order, before they contend
 * for the cross-process flock (flock locks belong to open file descriptions, so two operations of
 * one process would otherwise spin against each other).
 */
import { abortable } from '../port/abort.js';

export class KeyedGate {
  readonly #tails = new Map<string, Promise<void>>();

  /** Resolves to `leave` once every earlier entrant for `key` has left. */
  async enter(key: string, signal?: AbortSignal): Promise<() => void> {
    const previous = this.#tails.get(key);
    let open!: () => void;
    const mine = new Promise<void>((resolve) => (open = resolve));
    const tail = previous === undefined ? mine : previous.then(() => mine);
    this.#tails.set(key, tail);
    const leave = (): void => {
      open();
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
    };
    if (previous !== undefined) {
      try {
        await abortable(previous, signal);
      } catch (error) {
        // Abandoned while queued: our turn still passes through, in order, once the earlier one leaves.
        void previous.then(leave);
        throw error;
      }
    }
    return leave;
  }

  /** Ids with an operation running or queued. */
  get size(): number {
    return this.#tails.size;
  }
}
