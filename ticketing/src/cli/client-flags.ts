/** The flags of the `ticketing` commands that connect as clients (`run`, `leader`): the servers'
 * addresses, the secret (from a file, never from argv) and TLS, read into client options. */
import { Option, type Command } from 'commander';
import type { TicketClientOptions } from '../client/options.js';
import { addressList, readNamedFile, readSecretFile } from './flags.js';

export function addClientFlags(command: Command): Command {
  return command
    .requiredOption('--addresses <host:port,…>', "the server, or a cluster's nodes", addressList)
    .option('--secret-file <path>', 'file holding the shared secret')
    .option(
      '--tls-ca <path>',
      "connect with TLS, trusting this PEM CA for the servers, or 'system': Node's default CAs",
    )
    .option('--tls-cert <path>', 'PEM client certificate, for servers that require one (needs --tls-key)')
    .addOption(new Option('--tls-key <path>', 'PEM private key of --tls-cert'));
}

/** The client options the flags say; a flag combination that cannot work is a usage error. */
export function clientOptions(
  flags: Record<string, unknown>,
  usage: (message: string) => never,
): Pick<TicketClientOptions, 'addresses' | 'secret' | 'tls'> {
  if ((flags.tlsCert === undefined) !== (flags.tlsKey === undefined))
    usage('error: --tls-cert and --tls-key go together');
  if (flags.tlsCert !== undefined && flags.tlsCa === undefined)
    usage('error: --tls-cert needs --tls-ca (the CA that signed the servers)');
  const pem = (flag: string, what: string): string | undefined =>
    flags[flag] === undefined ? undefined : readNamedFile(flags[flag] as string, what, 'utf8');
  const tls =
    flags.tlsCa === undefined
      ? undefined
      : {
          ca: flags.tlsCa === 'system' ? undefined : pem('tlsCa', 'TLS CA file'),
          cert: pem('tlsCert', 'TLS certificate file'),
          key: pem('tlsKey', 'TLS key file'),
        };
  return {
    addresses: flags.addresses as string[],
    secret: flags.secretFile === undefined ? undefined : readSecretFile(flags.secretFile as string),
    tls,
  };
}
