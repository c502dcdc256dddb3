/**
 * Events on `node:diagnostics_channel` (no logging of our own). Subscribe with
 * `diagnostics_channel.subscribe('ticketing:server:effect', (message) => …)`. Publishing costs
 * nothing without subscribers; message objects are only built when someone listens.
 */
import diagnostics from 'node:diagnostics_channel';

export const channels = {
  // ---- server
  /** The server is listening: `{ server, host, port }`. */
  serverListening: diagnostics.channel('ticketing:server:listening'),
  /** A connection was accepted: `{ server, connection, remoteAddress, remotePort }`. */
  serverConnection: diagnostics.channel('ticketing:server:connection'),
  /** A connection ended: `{ server, connection, reason }` (reason: `closed`, `peer-ended`,
   * `bad_request`, `too_long`, `auth_failed`, `write-timeout`, `shutdown`; `capacity` for one
   * refused over the connection limit, with `connection` undefined). */
  serverDisconnect: diagnostics.channel('ticketing:server:disconnect'),
  /** Every effect of the state machine: `{ server, effect }` (see state.ts `Effect`). */
  serverEffect: diagnostics.channel('ticketing:server:effect'),
  /** A lease ran out and its grant ended without a release (the holder died or hung): `{ server,
   * key, owner, token }`. The `expired` effect alone, for an observer that wants no other. In
   * single mode it comes when the key is taken over by another acquire, handed to a waiter or
   * swept (within `sweepIntervalMs` of the expiry); in cluster mode at the expiry. */
  serverExpired: diagnostics.channel('ticketing:server:expired'),
  /** A connection's output backed up past the bound (reading paused) or drained (resumed):
   * `{ server, connection, paused, bufferedBytes }`. */
  serverBackpressure: diagnostics.channel('ticketing:server:backpressure'),
  /** A grant could not be delivered (its connection was gone) and was released at once:
   * `{ server, connection, key, token }`. */
  serverUndeliverable: diagnostics.channel('ticketing:server:undeliverable'),
  /** A background write of the state file failed (the next grant writes synchronously):
   * `{ server, error }`. */
  serverReserve: diagnostics.channel('ticketing:server:reserve'),
  /** A connection could not be accepted (e.g. EMFILE at the descriptor limit): `{ server, error }`. */
  serverAcceptError: diagnostics.channel('ticketing:server:accept-error'),

  /** A TLS handshake with a client failed (a plain-TCP client on a TLS port, a refused client
   * certificate, …): `{ server, error, remoteAddress }`. */
  serverTlsError: diagnostics.channel('ticketing:server:tls-error'),
  /** TLS material (server/tls-material.ts) was reloaded: `{ material, files, error? }`; with
   * `error` the files failed to load and the previous material stays in force. */
  tlsReload: diagnostics.channel('ticketing:tls:reload'),

  // ---- cluster mode (cluster/: leadership.ts, commit-loop.ts); `node` is the ClusterNode
  /** The node's role changed or a campaign failed: `{ node, role, reason, error? }`. */
  clusterRole: diagnostics.channel('ticketing:cluster:role'),
  /** The leader as this node last saw it in etcd: `{ node, leader }` (undefined: none). */
  clusterLeader: diagnostics.channel('ticketing:cluster:leader'),
  /** A batch committed: `{ node, writes, replies, txns, inFlight, seconds }` (the group-commit
   * batch size, the batches in flight when it was sent, itself included, and how long its txns
   * took, retries included). */
  clusterCommit: diagnostics.channel('ticketing:cluster:commit'),
  /** Whether etcd confirms this node's lease changed: `{ node, reachable }`. Not published while
   * the node starts (for one leader TTL) unless etcd answered. */
  clusterEtcd: diagnostics.channel('ticketing:cluster:etcd'),

  // ---- client
  /** A connection opened: `{ client, lane, address }` (lane: `acquire`, `release` or `observe`). */
  clientConnect: diagnostics.channel('ticketing:client:connect'),
  /** A connection closed: `{ client, lane, address, reason, error, backoffMs }`. */
  clientClose: diagnostics.channel('ticketing:client:close'),
  /** A request became indeterminate: `{ client, error }` (an IndeterminateError). */
  clientIndeterminate: diagnostics.channel('ticketing:client:indeterminate'),
  /** A best-effort exact-token release for a grant nobody could take (an unmatched `A`, or a
   * token seen in a half-received reply): `{ client, key, token, result?, error? }`. */
  clientOrphanRelease: diagnostics.channel('ticketing:client:orphan-release'),
  /** The leader hint changed: `{ client, address, via }` (via: `M`, `L`, `no_leader`). */
  clientLeader: diagnostics.channel('ticketing:client:leader'),
} as const;

export { publish } from '#kernel';
