// Tensor construction and comparison helpers shared by the op tests.
import { expect } from 'vitest';

import { addon, type FloatDType, type Tensor } from '../../lib/addon/index.js';

export { addon };
export type { FloatDType, Tensor };

export const FLOAT_DTYPES: readonly FloatDType[] = ['f32', 'bf16', 'f16'];

/** The widths most tests sweep: 1, a small odd size, just past a power of two, and past 128. */
export const ODD_SIZES = [1, 7, 33, 130] as const;

export function f32(shape: number[], data: ArrayLike<number>): Tensor {
  return addon.fromArray('f32', shape, Float32Array.from(data));
}

export function i32(shape: number[], data: ArrayLike<number>): Tensor {
  return addon.fromArray('i32', shape, Int32Array.from(data));
}

export function i64(shape: number[], data: ArrayLike<number>): Tensor {
  return addon.fromArray('i64', shape, BigInt64Array.from(Array.from(data), (v) => BigInt(v)));
}

export function floats(t: Tensor): Float32Array {
  return t.toArray() as Float32Array;
}

export function ints(t: Tensor): Int32Array {
  return t.toArray() as Int32Array;
}

/**
 * A weight tensor of `dtype` filled from f32 data (rounded to nearest even by the addon),
 * with the values it actually holds, widened back to f32: the reference uses those.
 */
export function weights(dtype: FloatDType, shape: number[], data: Float32Array): { tensor: Tensor; values: Float32Array } {
  const tensor = addon.fromArray(dtype, shape, data);
  return { tensor, values: floats(tensor) };
}

/** max |a - b| / max(max |b|, floor): the error relative to the expected values' scale. */
export function relativeError(actual: ArrayLike<number>, expected: ArrayLike<number>, floor = 1e-30): number {
  let maxDiff = 0;
  let scale = floor;
  for (let i = 0; i < expected.length; ++i) {
    const d = Math.abs(actual[i] - expected[i]);
    maxDiff = Number.isNaN(d) ? Infinity : Math.max(maxDiff, d);
    scale = Math.max(scale, Math.abs(expected[i]));
  }
  return maxDiff / scale;
}

/** Same length, and relative error (see relativeError) below `tol`. */
export function expectClose(actual: ArrayLike<number>, expected: ArrayLike<number>, tol = 1e-5): void {
  expect(actual.length).toBe(expected.length);
  const err = relativeError(actual, expected);
  if (err >= tol) {
    let worst = 0;
    for (let i = 0; i < expected.length; ++i)
      if (!(Math.abs(actual[i] - expected[i]) <= Math.abs(actual[worst] - expected[worst]))) worst = i;
    expect.fail(`relative error ${err} >= ${tol}; worst at [${worst}]: got ${actual[worst]}, want ${expected[worst]}`);
  }
}

/** Exact element-wise equality (NaN equals NaN), with the first mismatch in the message. */
export function expectSame(actual: ArrayLike<number>, expected: ArrayLike<number>): void {
  expect(actual.length).toBe(expected.length);
  for (let i = 0; i < expected.length; ++i)
    if (!Object.is(actual[i], expected[i]) && actual[i] !== expected[i])
      expect.fail(`element [${i}]: got ${actual[i]}, want ${expected[i]}`);
}

/** `fn` throws an Error (not a crash, not a non-Error value) whose message matches `pattern`. */
export function expectOpError(fn: () => unknown, pattern: RegExp): void {
  let caught: unknown;
  try {
    fn();
  } catch (e) {
    caught = e;
  }
  expect(caught, `expected an error matching ${pattern}`).toBeInstanceOf(Error);
  expect((caught as Error).message).toMatch(pattern);
}

/** A RegExp source matching `text` literally (for file paths in error messages). */
export function literal(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** Rows of `own` columns of x, each followed by its row of t: an adapted projection's output, its shrink after it (LoraDelta). */
export function withShrink(n: number, own: number, x: Float32Array, t: Float32Array, bCols: number): Float32Array {
  const y = new Float32Array(n * (own + bCols));
  for (let r = 0; r < n; r++) {
    y.set(x.subarray(r * own, (r + 1) * own), r * (own + bCols));
    y.set(t.subarray(r * bCols, (r + 1) * bCols), r * (own + bCols) + own);
  }
  return y;
}
