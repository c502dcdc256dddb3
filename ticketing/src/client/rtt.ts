/** The last few round trips of requests that could not have waited (an answer sent at once): how
 * late a grant that waited may have been sent, at most (lane.ts dates such a grant with it). */
const SAMPLES = 8;

export class RttWindow {
  readonly #samples: number[] = [];
  #next = 0;

  add(rtt: number): void {
    this.#samples[this.#next] = rtt;
    this.#next = (this.#next + 1) % SAMPLES;
  }

  /** The largest recent round trip, or undefined before the first. */
  get recent(): number | undefined {
    return this.#samples.length === 0 ? undefined : Math.max(...this.#samples);
  }
}
