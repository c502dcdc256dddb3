// Summaries of latency samples. Every figure in results.json is one of these, in the unit its
// field names say (…Us = microseconds, …Ms = milliseconds).

/** Linear-interpolated quantile of an ascending array (q in [0, 1]). */
function quantile(sorted, q) {
  if (sorted.length === 0) return NaN;
  const at = (sorted.length - 1) * q;
  const lo = Math.floor(at);
  const hi = Math.ceil(at);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo);
}

/** { n, mean, p50, p90, p99, max, min } of `values`, rounded to 4 significant digits. */
export function summarize(values) {
  const sorted = Float64Array.from(values).sort();
  const n = sorted.length;
  if (n === 0) return { n: 0, mean: NaN, p50: NaN, p90: NaN, p99: NaN, max: NaN, min: NaN };
  let sum = 0;
  for (const v of sorted) sum += v;
  return {
    n,
    mean: round(sum / n),
    p50: round(quantile(sorted, 0.5)),
    p90: round(quantile(sorted, 0.9)),
    p99: round(quantile(sorted, 0.99)),
    max: round(sorted[n - 1]),
    min: round(sorted[0]),
  };
}

export function median(values) {
  return quantile(Float64Array.from(values).sort(), 0.5);
}

/**
 * Rounds of one implementation → one figure: every sample pooled (`pooled`), each round's own
 * summary (`rounds`), and the median over rounds of each round's p50 / p99 (`p50`, `p99`: the
 * figures the tables and ratios use, so that a round hit by load drift on the shared machine does
 * not move them much).
 */
export function roundsSummary(rounds) {
  const each = rounds.map((samples) => summarize(samples));
  const pooled = summarize(rounds.flat());
  return {
    p50: round(median(each.map((s) => s.p50))),
    p99: round(median(each.map((s) => s.p99))),
    pooled,
    rounds: each.map(({ n, p50, p99, max }) => ({ n, p50, p99, max })),
  };
}

export function round(x, digits = 4) {
  if (!Number.isFinite(x) || x === 0) return x;
  const scale = 10 ** (digits - 1 - Math.floor(Math.log10(Math.abs(x))));
  return Math.round(x * scale) / scale;
}

/**
 * Milliseconds on a clock that every process of this host shares: CLOCK_MONOTONIC (what
 * process.hrtime reads, and what the C floor reads), so a time taken in one process can be
 * subtracted from a time taken in another. (performance.timeOrigin + performance.now() would do
 * too, but its origin is a wall-clock reading taken once per process, good to ~a few µs only.)
 */
export function sharedNow() {
  return Number(process.hrtime.bigint()) / 1e6;
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
