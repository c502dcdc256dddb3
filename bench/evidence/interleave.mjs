// The loop of the small before/after experiments (js-only.mjs, builds.mjs): each loop runs
// `cycles` acquire + release cycles per round, the rounds interleaved with their order alternating;
// prints each loop's median and every round, µs per cycle.
import { median } from '../lib/stats.mjs';

/** `loops`: name → async (n) => runs n cycles. */
export async function interleave(loops, { cycles, rounds, digits }) {
  for (const loop of Object.values(loops)) await loop(cycles / 5); // warm-up
  const perCycle = Object.fromEntries(Object.keys(loops).map((name) => [name, []]));
  for (let r = 0; r < rounds; r++) {
    const order = Object.keys(loops);
    if (r % 2 === 1) order.reverse();
    for (const name of order) {
      const t0 = performance.now();
      await loops[name](cycles);
      perCycle[name].push(((performance.now() - t0) * 1000) / cycles);
    }
  }
  for (const [name, us] of Object.entries(perCycle)) {
    const each = us.map((u) => u.toFixed(digits)).join(' ');
    console.log(`${name.padEnd(28)} median ${median(us).toFixed(digits)} µs/cycle  rounds ${each}`);
  }
}
