/**
 * The event stream of `GET /v1/locks/events`, read with fetch (not EventSource, which cannot send
 * the `Authorization` header): the secret stays in this page's memory and never goes into a URL.
 * It reconnects by itself, with a growing pause (up to 2 s), after the connection is lost or the
 * server is silent for 5 s (it sends a `node` event every second); every connection begins with a
 * full snapshot, so nothing from before a reconnect is left over.
 */

export interface StreamEvent {
  readonly event: string;
  readonly data: unknown;
}

export interface StreamHandlers {
  /** An event arrived. */
  onEvent(event: StreamEvent): void;
  /** The connection is up (`live`), or down and being retried (`down`, with why). */
  onState(state: 'live' | 'down', why?: string): void;
  /** The server refused the credentials (401, or an `unauthorized` event): the stream stopped. */
  onUnauthorized(): void;
}

const SILENCE_MS = 5_000;
const FIRST_RETRY_MS = 250;
const MAX_RETRY_MS = 2_000;

export class LockEventStream {
  readonly #handlers: StreamHandlers;
  #controller: AbortController | undefined;
  #running = false;

  constructor(handlers: StreamHandlers) {
    this.#handlers = handlers;
  }

  /** (Re)starts the stream for keys starting with `prefix`, sending `secret` if there is one. */
  start(prefix: string, secret: string | undefined): void {
    this.stop();
    this.#running = true;
    const controller = (this.#controller = new AbortController());
    void this.#run(prefix, secret, controller.signal);
  }

  stop(): void {
    this.#running = false;
    this.#controller?.abort();
    this.#controller = undefined;
  }

  async #run(prefix: string, secret: string | undefined, signal: AbortSignal): Promise<void> {
    let retryMs = FIRST_RETRY_MS;
    const url = `/v1/locks/events${prefix === '' ? '' : `?prefix=${encodeURIComponent(prefix)}`}`;
    const headers: Record<string, string> = secret === undefined ? {} : { authorization: `Bearer ${secret}` };
    while (!signal.aborted) {
      let why = 'connection lost';
      try {
        const silence = new AbortController();
        const onAbort = (): void => silence.abort();
        signal.addEventListener('abort', onAbort, { once: true });
        try {
          const response = await fetch(url, { headers, cache: 'no-store', signal: silence.signal });
          if (response.status === 401) {
            this.#unauthorized(signal);
            return;
          }
          if (!response.ok || response.body === null) {
            why = `HTTP ${response.status}`;
          } else {
            const ended = await this.#read(response.body, silence, () => (retryMs = FIRST_RETRY_MS));
            if (ended === 'unauthorized') {
              this.#unauthorized(signal);
              return;
            }
          }
        } finally {
          signal.removeEventListener('abort', onAbort);
        }
      } catch (error) {
        if (signal.aborted) return;
        why = error instanceof Error && error.name === 'AbortError' ? 'no data for 5 s' : 'server unreachable';
      }
      if (signal.aborted) return;
      this.#handlers.onState('down', why);
      await pause(retryMs, signal);
      retryMs = Math.min(retryMs * 2, MAX_RETRY_MS);
    }
  }

  #unauthorized(signal: AbortSignal): void {
    if (signal.aborted || !this.#running) return;
    this.stop();
    this.#handlers.onUnauthorized();
  }

  /** Reads events until the stream ends; aborts it after SILENCE_MS without a byte. */
  async #read(
    body: ReadableStream<Uint8Array>,
    silence: AbortController,
    onSnapshot: () => void,
  ): Promise<'ended' | 'unauthorized'> {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    let searchFrom = 0;
    let timer = setTimeout(() => silence.abort(), SILENCE_MS);
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return 'ended';
        clearTimeout(timer);
        timer = setTimeout(() => silence.abort(), SILENCE_MS);
        buffer += decoder.decode(value, { stream: true });
        let end: number;
        while ((end = buffer.indexOf('\n\n', searchFrom)) >= 0) {
          const event = parseEvent(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
          searchFrom = 0;
          if (event === undefined) continue;
          if (event.event === 'unauthorized') return 'unauthorized';
          if (event.event === 'snapshot') {
            onSnapshot();
            this.#handlers.onState('live');
          }
          this.#handlers.onEvent(event);
        }
        searchFrom = Math.max(0, buffer.length - 1);
      }
    } finally {
      clearTimeout(timer);
      reader.cancel().catch(() => {});
    }
  }
}

/** One event block: `event:` and `data:` lines (comments and other fields ignored). */
function parseEvent(block: string): StreamEvent | undefined {
  let event = 'message';
  const data: string[] = [];
  for (const line of block.split('\n')) {
    const colon = line.indexOf(':');
    if (colon <= 0) continue;
    const field = line.slice(0, colon);
    const value = line.slice(colon + 1).replace(/^ /, '');
    if (field === 'event') event = value;
    else if (field === 'data') data.push(value);
  }
  if (data.length === 0) return undefined;
  return { event, data: JSON.parse(data.join('\n')) as unknown };
}

function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });
}
