/**
 * `ticketing leader`: who leads a key (docs/ticketing-election-client.md). Once: the key's current
 * holder and its published value, or `none`; exit 0 when it has a leader (one exclusive holder), 3
 * when it has none. `--watch`: every change, one line each (JSON with `--json`), across reconnects
 * and failovers, until SIGINT or SIGTERM (exit 0).
 */
import type { Command } from 'commander';
import { durationOption } from '#kernel/flags';
import { TicketClient } from '../client.js';
import type { ObservedView } from '../client/observations.js';
import { addClientFlags, clientOptions } from './client-flags.js';
import { keyName } from './flags.js';

/** `ticketing leader`'s exit code when the key has no leader. */
const EXIT_NO_LEADER = 3;

/** One view as a line: `rev=… owner=… token=… value=…` (the value, which may hold spaces, last),
 * or `rev=… none` (`holders=N` when several hold it shared). */
function viewText(view: ObservedView): string {
  if (view.holder === null) return `rev=${view.rev} none${view.holders > 1 ? ` holders=${view.holders}` : ''}`;
  const { owner, token, value } = view.holder;
  return `rev=${view.rev} owner=${owner} token=${token}${value === null ? '' : ` value=${value}`}`;
}

/** One view as JSON: revs and tokens as strings (they may exceed 2^53). */
function viewJson(key: string, view: ObservedView): string {
  const holder =
    view.holder === null
      ? null
      : { owner: view.holder.owner, token: String(view.holder.token), value: view.holder.value };
  return JSON.stringify({ key, rev: String(view.rev), holder, holders: view.holders });
}

export function addLeaderCommand(program: Command): void {
  addClientFlags(
    program
      .command('leader')
      .description("print a key's leader (its one exclusive holder) and the value it published, or none"),
  )
    .requiredOption('--key <key>', 'the key', keyName)
    .option('--watch', 'print every change, one line each, until SIGINT or SIGTERM')
    .option('--json', 'print JSON, one object per line: {key, rev, holder: {owner, token, value} | null, holders}')
    .addOption(
      durationOption('--timeout <dur>', 'without --watch: give up when no server answers within this long', 5_000),
    )
    .addHelpText(
      'after',
      `\nA line: rev=<rev> owner=<owner> token=<token> value=<value> (value last, spaces and all; no value\nbefore the leader publishes one), or rev=<rev> none (holders=N when N hold the key shared).\nExit codes: 0 a leader (or --watch interrupted); ${EXIT_NO_LEADER} no leader; 64 usage error; 1 any other failure\n(no server answered within --timeout, a refused secret or certificate).`,
    )
    .action(async (flags: Record<string, unknown>, self: Command) => {
      const client = new TicketClient(clientOptions(flags, (message) => self.error(message)));
      const key = flags.key as string;
      const show = (view: ObservedView): void => {
        process.stdout.write(`${flags.json === true ? viewJson(key, view) : viewText(view)}\n`);
      };
      try {
        process.exitCode = flags.watch === true ? await watch(client, key, show) : await once(client, key, show, flags);
      } finally {
        client.destroy(); // nothing of ours is in flight: observations only
      }
    });
}

async function once(
  client: TicketClient,
  key: string,
  show: (view: ObservedView) => void,
  flags: Record<string, unknown>,
): Promise<number> {
  const timeoutMs = flags.timeout as number;
  const signal = AbortSignal.timeout(timeoutMs);
  const first = await client.observe(key, { signal }).next();
  if (first.done === true) {
    const addresses = (flags.addresses as string[]).join(', ');
    throw new Error(`no answer from ${addresses} within ${timeoutMs} ms`);
  }
  show(first.value);
  return first.value.holder === null ? EXIT_NO_LEADER : 0;
}

async function watch(client: TicketClient, key: string, show: (view: ObservedView) => void): Promise<number> {
  const interrupted = new AbortController();
  const stop = (): void => interrupted.abort();
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  try {
    for await (const view of client.observe(key, { signal: interrupted.signal })) show(view);
    return 0;
  } finally {
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
  }
}
