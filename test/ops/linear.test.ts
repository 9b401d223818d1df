// linear: out = x · wᵀ (+ bias), weights in any float dtype.
import { describe, expect, it } from 'vitest';

import { addon, expectClose, expectOpError, expectSame, f32, FLOAT_DTYPES, floats, i32, ODD_SIZES, weights } from './helpers.js';
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

// An extended projection names its shrink rows (slotOfRow, from, perSlot): CUDA may skip the
// rows of slots no row holds; the CPU computes them all. Checked: the arguments.
it('linear takes an extended projection\'s slot layout and checks it', () => {
  const rng = new Rng(5);
  const x = f32([2, 4], rng.floats(8)), w = f32([10, 4], rng.floats(40));
  const plain = addon.empty('f32', [2, 10]), named = addon.empty('f32', [2, 10]);
  addon.linear(plain, x, w, null);
  addon.linear(named, x, w, null, false, 0, i32([2], [1, 0]), 4, 2);  // rows 4-5 slot 0, 6-7 slot 1, 8-9 slot 2
  expectSame(floats(named), floats(plain));
  expectOpError(() => addon.linear(named, x, w, null, false, 0, i32([2], [1, 3]), 4, 2), /^linear: slotOfRow\[1\] = 3 is not one of the 3 slots/);
  expectOpError(() => addon.linear(named, x, w, null, false, 0, i32([2], [1, 0]), 11, 2), /^linear: from 11 is past w's 10 rows/);
  expectOpError(() => addon.linear(named, x, w, null, false, 0, i32([2], [1, 0]), 4, 0), /^linear: perSlot must be an integer >= 1/);
  expectOpError(() => addon.linear(named, x, w, null, false, 0, i32([3], [1, 0, 0]), 4, 2), /^linear: slotOfRow must be \[2\]/);
});
