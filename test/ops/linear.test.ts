// linear: out = x · wᵀ (+ bias), weights in any float dtype.
import { describe, expect, it } from 'vitest';

import { addon, expectClose, expectOpError, f32, FLOAT_DTYPES, floats, ODD_SIZES, weights } from './helpers.js';
import { Rng } from './random.js';
import * as ref from './reference.js';

// [inFeatures, outFeatures] pairs covering 1, odd sizes and a width past the 8-lane blocks.
const SHAPES = ODD_SIZES.flatMap((inF) => ODD_SIZES.filter((outF) => outF !== inF || inF === 1).map((outF) => [inF, outF]));

describe.each(FLOAT_DTYPES)('linear with %s weights', (dtype) => {
  describe.each([1, 5])('n = %i', (n) => {
    it.each(SHAPES)('in %i, out %i, with and without bias', (inF, outF) => {
      const rng = new Rng(inF * 1000 + outF * 10 + n + dtype.length);
      const x = rng.floats(n * inF);
      const w = weights(dtype, [outF, inF], rng.floats(outF * inF));
      const bias = weights(dtype, [outF], rng.floats(outF));
      const xt = f32([n, inF], x);
      const out = addon.empty('f32', [n, outF]);

      addon.linear(out, xt, w.tensor, null);
      expectClose(floats(out), ref.linear(x, w.values, null, n, inF, outF));

      addon.linear(out, xt, w.tensor, bias.tensor);
      expectClose(floats(out), ref.linear(x, w.values, bias.values, n, inF, outF));
    });
  });
});

it('linear: an f32 bias with bf16 weights', () => {
  const rng = new Rng(9);
  const x = rng.floats(3 * 33);
  const w = weights('bf16', [7, 33], rng.floats(7 * 33));
  const bias = rng.floats(7);
  const out = addon.empty('f32', [3, 7]);
  addon.linear(out, f32([3, 33], x), w.tensor, f32([7], bias));
  expectClose(floats(out), ref.linear(x, w.values, bias, 3, 33, 7));
});

it('linear rejects bad arguments, naming them', () => {
  const x = addon.zeros('f32', [2, 8]);
  const w = addon.zeros('bf16', [4, 8]);
  const out = addon.empty('f32', [2, 4]);
  expectOpError(() => addon.linear(out, x, addon.zeros('bf16', [4, 7]), null), /^linear: w is bf16\[4, 7\] \(\[out, in\]\) but x f32\[2, 8\] has 8 columns/);
  expectOpError(() => addon.linear(out, x, addon.zeros('i32', [4, 8]), null), /^linear: w must be f32, bf16 or f16/);
  expectOpError(() => addon.linear(out, x, addon.zeros('bf16', [32]), null), /^linear: w must have 2 dims/);
  expectOpError(() => addon.linear(addon.empty('f32', [2, 5]), x, w, null), /^linear: out must be \[2, 4\]/);
  expectOpError(() => addon.linear(out, x, w, addon.zeros('bf16', [5])), /^linear: bias must be \[4\]/);
  expectOpError(() => addon.linear(out, addon.zeros('bf16', [2, 8]), w, null), /^linear: x must be f32/);
  expectOpError(() => addon.linear(out, x, {} as never, null), /^linear: w must be a Tensor/);
});

it('gemmTuning takes one boolean (on the CPU the choice it turns on has nothing to choose)', () => {
  const x = f32([2, 3], [1, 2, 3, 4, 5, 6]), w = f32([1, 3], [1, 0, -1]), out = addon.empty('f32', [2, 1]);
  addon.gemmTuning(true);
  try {
    addon.linear(out, x, w, null);
  } finally {
    addon.gemmTuning(false);
  }
  expect(Array.from(floats(out))).toEqual([-2, -2]);
  expect(() => (addon.gemmTuning as (v: unknown) => void)('yes')).toThrow(/gemmTuning\(on\): one boolean/);
  expect(() => (addon.gemmTuning as () => void)()).toThrow(/one boolean/);
});
