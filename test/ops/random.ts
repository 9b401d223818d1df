// A small seeded generator for op tests, and float rounding written independently of the
// addon's conversions (plain arithmetic, not bit tricks), so tests can check those too.
import type { FloatDType } from '../../lib/addon/index.js';

/** mulberry32: a tiny, fast 32-bit PRNG; the same seed always gives the same stream. */
export class Rng {
  private state: number;

  constructor(seed: number) {
    this.state = seed >>> 0;
  }

  /** Uniform in [0, 1). */
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  uniform(lo: number, hi: number): number {
    return lo + (hi - lo) * this.next();
  }

  /** An integer in [lo, hi). */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo));
  }

  /** n f32-representable values uniform in [lo, hi). */
  floats(n: number, lo = -1, hi = 1): Float32Array {
    const out = new Float32Array(n);
    for (let i = 0; i < n; ++i) out[i] = this.uniform(lo, hi);
    return out;
  }

  /** n integers in [lo, hi). */
  ints(n: number, lo: number, hi: number): Int32Array {
    const out = new Int32Array(n);
    for (let i = 0; i < n; ++i) out[i] = this.int(lo, hi);
    return out;
  }

  /** A shuffled copy (Fisher-Yates). */
  shuffle<T>(items: readonly T[]): T[] {
    const a = items.slice();
    for (let i = a.length - 1; i > 0; --i) {
      const j = this.int(0, i + 1);
      [a[i], a[j]] = [a[j], a[i]];
    }
    return a;
  }
}

/** Rounds half to even, for a non-negative number. */
function roundHalfEven(v: number): number {
  const f = Math.floor(v);
  const d = v - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

/**
 * Rounds x to a binary float with `mantissaBits` stored bits, smallest normal exponent
 * `minExp` and largest finite value `max` (round to nearest even; overflow gives ±inf).
 */
function roundToFormat(x: number, mantissaBits: number, minExp: number, max: number): number {
  if (!Number.isFinite(x) || x === 0) return x;
  const a = Math.abs(x);
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e -= 1;
  if (2 ** (e + 1) <= a) e += 1;
  const ulp = 2 ** (Math.max(e, minExp) - mantissaBits);
  const r = roundHalfEven(a / ulp) * ulp;
  return Math.sign(x) * (r > max ? Infinity : r);
}

const BF16_MAX = (2 - 2 ** -7) * 2 ** 127;
const F16_MAX = 65504;

/** The bf16 value nearest to x (round to nearest even), as a number. */
export function roundBf16(x: number): number {
  return roundToFormat(Math.fround(x), 7, -126, BF16_MAX);
}

/** The f16 value nearest to x (round to nearest even), as a number. */
export function roundF16(x: number): number {
  return roundToFormat(Math.fround(x), 10, -14, F16_MAX);
}

/** Rounds every element to what a tensor of `dtype` would hold. */
export function roundTo(dtype: FloatDType, data: ArrayLike<number>): Float32Array {
  const round = dtype === 'bf16' ? roundBf16 : dtype === 'f16' ? roundF16 : Math.fround;
  return Float32Array.from(data, round);
}
