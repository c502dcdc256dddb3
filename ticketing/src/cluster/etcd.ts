/**
 * The etcd client for cluster mode, with our own fault handling. Loaded only by `serve --cluster`
 * (a dynamic import), so the client and the single-mode server never load etcd3 or gRPC.
 *
 * etcd3's defaults retry 3 times behind a per-host circuit breaker that stays open 5 s after 3
 * failures: a ~1 s etcd election became 5–6 s of failed calls. Here a host that fails is skipped
 * for `hostCooldownMs` only, a failed call is retried at once on the next host (our writes are
 * absolute puts and deletes under a guard, so a retry is idempotent), and every unary call has a
 * deadline of `callTimeoutMs`.
 */
import type { Etcd3 } from 'etcd3';

export interface EtcdClientOptions {
  /** `http://host:port` URLs. */
  readonly hosts: readonly string[];
  readonly callTimeoutMs: number;
  readonly hostCooldownMs: number;
}

/** The subset of cockatiel's IPolicy that etcd3 calls. */
interface MinimalPolicy {
  execute<T>(fn: (context: { signal: AbortSignal; attempt: number }) => PromiseLike<T> | T): Promise<T>;
}

class HostSkippedError extends Error {
  /** etcd3's connection pool moves on to the next host for this (cockatiel's marker). */
  readonly isBrokenCircuitError = true;
}

export async function createEtcdClient(options: EtcdClientOptions): Promise<Etcd3> {
  const etcd3 = await import('etcd3');
  const { isRecoverableError } = etcd3;
  const never = new AbortController().signal;
  const hostPolicy = (): MinimalPolicy => {
    let skipUntil = 0;
    return {
      async execute(fn) {
        if (performance.now() < skipUntil) throw new HostSkippedError('etcd host skipped after a failure');
        try {
          return await fn({ signal: never, attempt: 0 });
        } catch (error) {
          if (isRecoverableError(error as Error)) skipUntil = performance.now() + options.hostCooldownMs;
          throw error;
        }
      },
    };
  };
  const attempts = options.hosts.length;
  const globalPolicy: MinimalPolicy = {
    async execute(fn) {
      for (let attempt = 0; ; attempt++) {
        try {
          return await fn({ signal: never, attempt });
        } catch (error) {
          if (attempt + 1 >= attempts || !isRecoverableError(error as Error)) throw error;
        }
      }
    },
  };
  return new etcd3.Etcd3({
    hosts: [...options.hosts],
    dialTimeout: options.callTimeoutMs,
    defaultCallOptions: (context) => (context.isStream ? {} : { deadline: Date.now() + options.callTimeoutMs }),
    faultHandling: {
      host: hostPolicy as never,
      global: globalPolicy as never,
    },
  });
}
