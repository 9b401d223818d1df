// Poisson arrivals: exponential gaps of mean 1/rate from the seeded generator, so a rerun with
// the same seed sends the same schedule.
import { Rng } from '../synth/rng.js';

/** Send times in seconds from the start: `count` of them, or all before `durationS`. */
export function poissonArrivals(rate: number, limit: { count?: number; durationS?: number }, seed: number): number[] {
  if (!(rate > 0)) throw new Error(`arrival rate must be positive, got ${rate}`);
  const rng = new Rng(seed, 0xa771);
  const times: number[] = [];
  let t = 0;
  for (;;) {
    if (limit.count !== undefined && times.length >= limit.count) break;
    t += -Math.log(1 - rng.float()) / rate;
    if (limit.durationS !== undefined && t >= limit.durationS) break;
    times.push(t);
  }
  return times;
}
