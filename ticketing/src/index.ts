/** @flocklease/ticketing: the networked lock service (server, client, wire protocol, state machine). */
export {
  TicketServer,
  SERVER_DEFAULTS,
  type TicketServerOptions,
  type ServerAddress,
  type ServerStats,
  type LockView,
  type Readiness,
} from './server/server.js';
export { TlsMaterial, TlsMaterialError, TLS_MIN_VERSION, type TlsFiles } from './server/tls-material.js';
export {
  TicketClient,
  type TicketClientOptions,
  type AcquireOptions,
  type AcquireResult,
  type ReleaseOptions,
  type ReleaseResult,
  type BackoffOptions,
  type RenewResult,
  type HoldOptions,
  type TicketHold,
  type PublishResult,
  type CampaignOptions,
  type Leadership,
  type Observation,
  type ObservedView,
} from './client.js';
export { TicketLease, type TicketLeaseGrant } from './ticket-lease.js';
export {
  TicketError,
  IndeterminateError,
  RefusedError,
  AuthFailedError,
  CapacityError,
  CertificateError,
  TlsMismatchError,
  UnlistedLeaderError,
  DuplicateRequestError,
  ModeConflictError,
  LockLostError,
  NotAcquiredError,
  ObservationLimitError,
  LeaseHeldError,
  ConnectError,
  ClientClosedError,
  ServerError,
  ProtocolError,
  type IndeterminateReason,
} from './errors.js';
export { EtcdAccessError, EtcdAuthError, EtcdPermissionError, EtcdTlsError } from './cluster/errors.js';
export { TicketState, DEFAULT_LIMITS, type TicketStateOptions } from './state.js';
export type { Command, Effect, GrantPath, BusyLimit, KeyView, HeldKey, HolderView, SessionId } from './state-types.js';
export { MAX_PERMITS, type LockMode } from './modes.js';
export {
  DEFAULT_MAX_LINE_BYTES,
  MAX_NAME_BYTES,
  MAX_TOKEN,
  LineFramer,
  parseRequest,
  parseReply,
  isName,
  isTokenText,
  type Request,
  type Reply,
  type ErrorCode,
} from './protocol.js';
export { channels } from './events.js';
