/** A reader of `GET /v1/locks/events` for the tests: real HTTP to 127.0.0.1, events parsed as
 * they arrive, every wait bounded. */
import http from 'node:http';

export interface SseEvent {
  readonly event: string;
  readonly data: Record<string, unknown>;
}

export interface EventReader {
  readonly status: number;
  /** Every event so far. */
  readonly events: readonly SseEvent[];
  /** The next event not yet returned (of that name, when given; others are passed over). */
  next(name?: string, timeoutMs?: number): Promise<SseEvent>;
  /** Resolves once the server ended the stream. */
  readonly ended: Promise<void>;
  close(): void;
}

export function openEvents(
  port: number,
  path = '/v1/locks/events',
  headers: Record<string, string> = {},
  timeoutMs = 5_000,
): Promise<EventReader> {
  return new Promise((resolve, reject) => {
    const request = http.get({ host: '127.0.0.1', port, path, headers });
    const timer = setTimeout(() => request.destroy(new Error(`${path}: no answer in time`)), timeoutMs);
    request.on('error', reject);
    request.on('response', (response) => {
      clearTimeout(timer);
      const events: SseEvent[] = [];
      let consumed = 0;
      let buffer = '';
      let wake: (() => void) | undefined;
      let endedFlag = false;
      const ended = new Promise<void>((done) =>
        response.on('close', () => {
          endedFlag = true;
          wake?.();
          done();
        }),
      );
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => {
        buffer += chunk;
        let end: number;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const name = /^event: (.*)$/m.exec(block)?.[1] ?? 'message';
          const data = /^data: (.*)$/m.exec(block)?.[1];
          if (data !== undefined) events.push({ event: name, data: JSON.parse(data) as Record<string, unknown> });
        }
        wake?.();
      });
      response.on('error', () => {});
      resolve({
        status: response.statusCode!,
        events,
        ended,
        async next(name, waitMs = 5_000) {
          const deadline = Date.now() + waitMs;
          for (;;) {
            while (consumed < events.length) {
              const event = events[consumed++]!;
              if (name === undefined || event.event === name) return event;
            }
            if (endedFlag) throw new Error(`the stream ended before ${name ?? 'an'} event`);
            const left = deadline - Date.now();
            if (left <= 0) throw new Error(`no ${name ?? ''} event within ${waitMs} ms`);
            await new Promise<void>((done) => {
              const t = setTimeout(done, left);
              wake = () => {
                clearTimeout(t);
                done();
              };
            });
            wake = undefined;
          }
        },
        close: () => request.destroy(),
      });
    });
  });
}
