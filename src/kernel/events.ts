import type diagnostics from 'node:diagnostics_channel';

/** Publishes on a `diagnostics_channel`; the message is only built when someone listens. */
export function publish(channel: diagnostics.Channel, message: () => unknown): void {
  if (channel.hasSubscribers) channel.publish(message());
}
