/**
 * Subscriptions to the diagnostics_channel events of events.ts, for the messages of one server
 * (`message.server`) or its cluster node (`message.node`) only: two servers in one process do not
 * see each other's events.
 */
import type diagnostics from 'node:diagnostics_channel';

export class Subscriptions {
  readonly #server: object;
  readonly #node: object | undefined;
  readonly #active: Array<[diagnostics.Channel, (message: unknown) => void]> = [];

  constructor(server: object, node: object | undefined) {
    this.#server = server;
    this.#node = node;
  }

  on<T>(channel: diagnostics.Channel, listener: (message: T) => void): void {
    const mine = (message: unknown): void => {
      const { server, node } = message as { readonly server?: unknown; readonly node?: unknown };
      if (server === this.#server || (node !== undefined && node === this.#node)) listener(message as T);
    };
    channel.subscribe(mine);
    this.#active.push([channel, mine]);
  }

  close(): void {
    for (const [channel, listener] of this.#active) channel.unsubscribe(listener);
    this.#active.length = 0;
  }
}
