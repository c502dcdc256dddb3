/** Types of harness.mjs: a real etcd cluster, TCP proxies and Ticketing nodes on loopback. */
import type { ChildProcess } from 'node:child_process';
import type { CertificateAuthority } from '../certs.mjs';

export declare const ROOT: string;
export declare const TICKETING_CLI: string;
export declare const ETCD_HEARTBEAT_MS: number;
export declare const ETCD_ELECTION_MS: number;
export declare const PROBE_KEY: string;
/** The etcd user a secure cluster makes for Ticketing nodes, and the prefix it may read and write. */
export declare const SECURE_USER: string;
export declare const SECURE_PREFIX: string;

/** Sends `signal` and waits for the exit (SIGKILL after `graceMs`); SIGSTOP returns at once. */
export declare function killChild(child: ChildProcess, signal?: NodeJS.Signals, graceMs?: number): Promise<void>;

/** `{ binary }`, or `{ reason }` saying why etcd cannot be had (for a one-line skip message).
 * Installs nothing: `sh scripts/setup.sh etcd` does. */
export type FindEtcdResult = { binary: string; reason?: undefined } | { binary?: undefined; reason: string };
export declare function findEtcd(): Promise<FindEtcdResult>;

export declare function freePorts(count: number, host?: string): Promise<number[]>;

export interface EtcdMemberStatus {
  memberId: string;
  leaderId: string;
  raftTerm: number;
}

export interface EtcdMember {
  readonly index: number;
  readonly name: string;
  /** `http://127.0.0.1:<port>` */
  readonly clientUrl: string;
  readonly peerUrl: string;
  readonly dataDir: string;
  readonly logFile: string;
  readonly child: ChildProcess | undefined;
  readonly pid: number | undefined;
  readonly alive: boolean;
  kill(signal?: NodeJS.Signals): Promise<void>;
  /** Starts it again on the same ports and data dir; waits until it is healthy. */
  restart(options?: { timeoutMs?: number }): Promise<void>;
  healthy(timeoutMs?: number): Promise<boolean>;
  status(timeoutMs?: number): Promise<EtcdMemberStatus>;
  /** The whole log file. */
  log(): string;
}

export interface EtcdCluster extends AsyncDisposable {
  readonly dir: string;
  readonly token: string;
  readonly members: EtcdMember[];
  /** Client URLs, one per member, in member order. */
  readonly endpoints: string[];
  readonly heartbeatMs: number;
  readonly electionMs: number;
  /** Index of etcd's current leader as the live members report it, or -1 when none is known. */
  leaderIndex(options?: { timeoutMs?: number }): Promise<number>;
  /** Waits (bounded) for a live leader other than `not`; resolves its index. */
  waitForLeader(options?: { timeoutMs?: number; not?: number }): Promise<number>;
  waitHealthy(members?: EtcdMember[], timeoutMs?: number): Promise<void>;
  kill(index: number, signal?: NodeJS.Signals): Promise<void>;
  restart(index: number, options?: { timeoutMs?: number }): Promise<void>;
  /** The last lines of every member's log. */
  logs(): string;
  /** Started with `secure`: TLS for clients and peers (client certificates required), auth on. */
  readonly secure: boolean;
  /** The cluster's CA (secure only): issue more certificates with it. */
  readonly ca: CertificateAuthority | undefined;
  /** The `ticketing serve` flags that reach a secure cluster as SECURE_USER (CA, client
   * certificate and key, user, password file); `[]` otherwise. */
  readonly ticketingArgs: string[];
  /** Runs etcdctl as root (by root's client certificate); secure only. Resolves its stdout. */
  etcdctl(args: string[], options?: { input?: string }): Promise<string>;
  /** Makes an etcd user with a role that may read and write keys starting with `prefix` (no
   * role without one); secure only. Resolves the path of a 0600 file holding its password. */
  addUser(name: string, options?: { prefix?: string; password?: string }): Promise<string>;
  /** Kills every member by PID and removes the data dirs. Idempotent. */
  stop(): Promise<void>;
}

export interface EtcdClusterOptions {
  members?: number;
  binary?: string;
  heartbeatMs?: number;
  electionMs?: number;
  startTimeoutMs?: number;
  extraArgs?: string[];
  /** TLS for clients and peers with certificates from a CA made for the cluster
   * (`--client-cert-auth`), and auth on: users root and SECURE_USER. */
  secure?: boolean;
}
export declare function startEtcdCluster(options?: EtcdClusterOptions): Promise<EtcdCluster>;

export interface CutOptions {
  /** 'refuse': new connects get ECONNREFUSED; 'blackhole': they are accepted and never answered. */
  mode?: 'refuse' | 'blackhole';
  /** 'destroy' (default) resets current connections; 'stall' keeps them open and drops their bytes. */
  existing?: 'destroy' | 'stall';
}

export interface TcpProxy extends AsyncDisposable {
  readonly host: string;
  readonly port: number;
  /** `127.0.0.1:<port>` */
  readonly address: string;
  readonly state: 'open' | 'refuse' | 'blackhole';
  /** Connections being forwarded (or stalled) now. */
  readonly connections: number;
  /** Connections accepted since the start. */
  readonly accepted: number;
  cut(options?: CutOptions): Promise<void>;
  restore(): Promise<void>;
  close(): Promise<void>;
}
export declare function startTcpProxy(
  targetHost: string,
  targetPort: number,
  options?: { host?: string; port?: number },
): Promise<TcpProxy>;

export interface TicketingNode {
  readonly index: number;
  readonly host: string;
  readonly port: number;
  /** `<host>:<port>`: what the node advertises. */
  readonly address: string;
  readonly child: ChildProcess | undefined;
  readonly pid: number | undefined;
  readonly alive: boolean;
  /** The last 16 KiB of its stderr (unless started with stderr: 'inherit'). */
  readonly stderr: string;
  args(): string[];
  start(): Promise<TicketingNode>;
  kill(signal?: NodeJS.Signals): Promise<void>;
  /** SIGTERM (drain), then SIGKILL after `graceMs`. */
  stop(graceMs?: number): Promise<void>;
  /** SIGKILL if alive, then start again on the same port. */
  restart(): Promise<TicketingNode>;
}

export interface TicketingNodes extends AsyncDisposable {
  readonly nodes: TicketingNode[];
  readonly prefix: string;
  readonly addresses: string[];
  findLeader(options?: ProbeOptions): Promise<TicketingNode | undefined>;
  waitForLeader(options?: WaitForLeaderOptions): Promise<TicketingNode>;
  stop(graceMs?: number): Promise<void>;
}

export interface TicketingNodesOptions {
  count?: number;
  /** The same URLs for every node, or per node (e.g. one node through a proxy). */
  etcdEndpoints: string[] | ((index: number) => string[]);
  prefix?: string;
  leaderTtl?: string;
  lease?: string;
  extraArgs?: string[];
  /** Extra arguments per node index. */
  nodeArgs?: string[][];
  /** The loopback address each node listens on and advertises (default 127.0.0.1 for every
   * node; e.g. 127.0.0.2, 127.0.0.3, … for nodes that share a port number, as on separate hosts). */
  hosts?: string[];
  env?: NodeJS.ProcessEnv;
  /** Node options before the script, e.g. ['--import', probeUrl] to observe the node's diagnostics. */
  execArgv?: string[];
  cli?: string;
  startTimeoutMs?: number;
  stderr?: 'keep' | 'inherit';
}
export declare function startTicketingNodes(options: TicketingNodesOptions): Promise<TicketingNodes>;

export interface ProbeOptions {
  timeoutMs?: number;
  secret?: string;
  /** Ask over TLS with these `tls.connect` options. */
  tls?: import('node:tls').ConnectionOptions;
}
export interface WaitForLeaderOptions extends ProbeOptions {
  not?: TicketingNode;
}
export type ProbeResult =
  | { role: 'leader' }
  | { role: 'follower'; leader: string }
  | { role: 'error'; code: string; line?: string }
  | { role: 'unreachable'; why: string };
export declare function probeNode(address: string, options?: ProbeOptions): Promise<ProbeResult>;
export declare function findLeader<N extends { address: string; alive?: boolean }>(
  nodes: N[],
  options?: ProbeOptions,
): Promise<N | undefined>;
export declare function waitForLeader<N extends { address: string; alive?: boolean }>(
  nodes: N[],
  options?: ProbeOptions & { timeoutMs?: number; not?: N },
): Promise<N>;

/** CPU time used so far by `pid` (user + system) in ms, from /proc/<pid>/stat. */
export declare function cpuTimeMs(pid: number): number | undefined;
