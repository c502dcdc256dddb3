// In-process latencies with tinybench: a fixed number of iterations (after a fixed warm-up), every
// sample kept, timed with process.hrtime (ns resolution).
import { Bench } from 'tinybench';

/** Runs `fn` `iterations` times after `warmup` untimed calls; returns each call's latency in µs. */
export async function tinySamples(name, fn, { iterations, warmup }) {
  const bench = new Bench({
    name,
    time: 0, // no time budget: exactly `iterations` samples
    iterations,
    warmup: warmup > 0,
    warmupIterations: warmup,
    warmupTime: 0,
    retainSamples: true,
    timestampProvider: 'hrtimeNow',
    throws: true,
  });
  bench.add(name, fn);
  await bench.run();
  const result = bench.tasks[0].result;
  if (result.state !== 'completed') throw new Error(`${name}: tinybench task ${result.state}`);
  return Array.from(result.latency.samples, (ms) => ms * 1000);
}
