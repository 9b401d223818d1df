// RMSNorm variants: rmsNorm, addRmsNorm, headRmsNorm.
import { describe, expect, it } from 'vitest';

import { addon, expectClose, expectOpError, expectSame, f32, FLOAT_DTYPES, floats, ODD_SIZES, weights } from './helpers.js';
import { Rng } from './random.js';
import * as ref from './reference.js';
import type { HeadLayout } from './reference.js';

const EPS = 1e-6;

describe.each(FLOAT_DTYPES)('rmsNorm with %s w', (dtype) => {
  it.each(ODD_SIZES)('dim %i: rows of a 3-D x into a 2-D out', (dim) => {
    const rng = new Rng(dim + 100 * dtype.length);
    const x = rng.floats(2 * 3 * dim, -3, 3);
    const w = weights(dtype, [dim], rng.floats(dim, 0.5, 1.5));
    const out = addon.empty('f32', [6, dim]);
    addon.rmsNorm(out, f32([2, 3, dim], x), w.tensor, EPS);
    expectClose(floats(out), ref.rmsNorm(x, w.values, EPS));
  });

  it.each(ODD_SIZES)('dim %i: out may alias x', (dim) => {
    const rng = new Rng(dim + 7);
    const x = rng.floats(5 * dim, -3, 3);
    const w = weights(dtype, [dim], rng.floats(dim, -2, 2));
    const t = f32([5, dim], x);
    addon.rmsNorm(t, t, w.tensor, EPS);
    expectClose(floats(t), ref.rmsNorm(x, w.values, EPS));
  });
});

it('rmsNorm adds eps inside the square root', () => {
  const x = [3, -4, 1e-3];
  const w = [1, 2, 3];
  const out = addon.empty('f32', [1, 3]);
  addon.rmsNorm(out, f32([1, 3], x), f32([3], w), 0.5);
  expectClose(floats(out), ref.rmsNorm(x, w, 0.5));
});

describe.each(FLOAT_DTYPES)('addRmsNorm with %s w', (dtype) => {
  it.each(ODD_SIZES)('dim %i: updates residual in place and writes the norm to out', (dim) => {
    const rng = new Rng(dim * 5 + dtype.length);
    const n = 4;
    const residual = rng.floats(n * dim, -2, 2);
    const x = rng.floats(n * dim, -2, 2);
    const w = weights(dtype, [dim], rng.floats(dim, 0.5, 1.5));
    const res = f32([n, dim], residual);
    const out = addon.empty('f32', [n, dim]);
    addon.addRmsNorm(res, f32([n, dim], x), w.tensor, EPS, out);
    const want = ref.addRmsNorm(residual, x, w.values, EPS);
    expectClose(floats(res), want.residual);
    expectClose(floats(out), want.out);
  });
});

// next (the width of the projection that reads out) is a scheduling hint: the same result.
it('rmsNorm and addRmsNorm take the next projection\'s width and give the same result', () => {
  const rng = new Rng(11);
  const dim = 64;
  const x = rng.floats(2 * dim, -2, 2);
  const residual = rng.floats(2 * dim, -2, 2);
  const w = f32([dim], rng.floats(dim, 0.5, 1.5));
  const plain = addon.empty('f32', [2, dim]);
  const hinted = addon.empty('f32', [2, dim]);
  addon.rmsNorm(plain, f32([2, dim], x), w, EPS);
  addon.rmsNorm(hinted, f32([2, dim], x), w, EPS, 4 * dim);
  expectSame(floats(hinted), floats(plain));
  const [resPlain, resHinted] = [f32([2, dim], residual), f32([2, dim], residual)];
  addon.addRmsNorm(resPlain, f32([2, dim], x), w, EPS, plain);
  addon.addRmsNorm(resHinted, f32([2, dim], x), w, EPS, hinted, 4 * dim);
  expectSame(floats(hinted), floats(plain));
  expectSame(floats(resHinted), floats(resPlain));
});

it('addRmsNorm: the sum is the f32 sum', () => {
  const rng = new Rng(3);
  const residual = rng.floats(33, -1e3, 1e3);
  const x = rng.floats(33, -1, 1);
  const res = f32([1, 33], residual);
  addon.addRmsNorm(res, f32([1, 33], x), f32([33], new Float32Array(33).fill(1)), EPS, addon.empty('f32', [1, 33]));
  expectSame(floats(res), Float32Array.from(ref.add(residual, x)));
});

describe.each(FLOAT_DTYPES)('headRmsNorm with %s weights', (dtype) => {
  const layouts: HeadLayout[] = [
    { numHeads: 1, numKvHeads: 1, headDim: 1 },
    { numHeads: 4, numKvHeads: 2, headDim: 7 },
    { numHeads: 4, numKvHeads: 1, headDim: 33 },
    { numHeads: 2, numKvHeads: 2, headDim: 130 },
  ];
  it.each(layouts)('H $numHeads, K $numKvHeads, hd $headDim: q and k heads normed, v untouched', (l) => {
    const rng = new Rng(l.headDim * 13 + l.numKvHeads + dtype.length);
    const n = 3;
    const width = ref.rowWidth(l);
    const qkv = rng.floats(n * width, -3, 3);
    const qw = weights(dtype, [l.headDim], rng.floats(l.headDim, 0.5, 1.5));
    const kw = weights(dtype, [l.headDim], rng.floats(l.headDim, -1.5, -0.5));
    const t = f32([n, width], qkv);
    addon.headRmsNorm(t, qw.tensor, kw.tensor, l.numHeads, l.numKvHeads, l.headDim, EPS);
    const got = floats(t);
    const want = ref.headRmsNorm(qkv, qw.values, kw.values, l, EPS);
    expectClose(got, want);
    const vStart = ref.headOffset(l, 'v', 0);
    for (let r = 0; r < n; ++r)
      expectSame(got.subarray(r * width + vStart, (r + 1) * width), qkv.subarray(r * width + vStart, (r + 1) * width));
  });
});

describe('bad arguments', () => {
  const x = addon.zeros('f32', [3, 8]);
  const w = addon.zeros('bf16', [8]);

  it('rmsNorm', () => {
    expectOpError(() => addon.rmsNorm(addon.empty('f32', [3, 8]), x, addon.zeros('bf16', [7]), EPS), /^rmsNorm: x f32\[3, 8\] must end in the length of w bf16\[7\]/);
    expectOpError(() => addon.rmsNorm(addon.empty('f32', [2, 8]), x, w, EPS), /^rmsNorm: out f32\[2, 8\] must have as many elements as x/);
    expectOpError(() => addon.rmsNorm(addon.empty('f32', [3, 8]), addon.zeros('bf16', [3, 8]), w, EPS), /^rmsNorm: x must be f32/);
    expectOpError(() => addon.rmsNorm(addon.empty('f32', [3, 8]), x, addon.zeros('bf16', [1, 8]), EPS), /^rmsNorm: w must have 1 dims/);
    expectOpError(() => addon.rmsNorm(addon.empty('f32', [3, 8]), x, w, 'tiny' as never), /^rmsNorm: eps must be a number/);
    expectOpError(() => addon.rmsNorm(addon.empty('f32', [3, 8]), x, w, EPS, -1), /^rmsNorm: next must be an integer >= 0/);
    expectOpError(() => addon.rmsNorm(addon.empty('f32', [3, 8]), x, w, EPS, 2.5), /^rmsNorm: next must be an integer >= 0/);
  });

  it('rmsNorm with an empty w throws instead of dividing by zero', () => {
    expectOpError(() => addon.rmsNorm(addon.empty('f32', [3, 0]), addon.zeros('f32', [3, 0]), addon.zeros('f32', [0]), EPS), /^rmsNorm: w/);
  });

  it('addRmsNorm', () => {
    const out = addon.empty('f32', [3, 8]);
    expectOpError(() => addon.addRmsNorm(addon.zeros('f32', [3, 8]), addon.zeros('f32', [2, 8]), w, EPS, out), /^addRmsNorm: x must be \[3, 8\]/);
    expectOpError(() => addon.addRmsNorm(addon.zeros('f32', [3, 8]), x, w, EPS, addon.empty('f32', [3, 7])), /^addRmsNorm: out must be \[3, 8\]/);
    expectOpError(() => addon.addRmsNorm(addon.zeros('f32', [24]), x, w, EPS, out), /^addRmsNorm: residual must have 2 dims/);
    expectOpError(() => addon.addRmsNorm(addon.zeros('f32', [3, 8]), x, addon.zeros('i32', [8]), EPS, out), /^addRmsNorm: w must be f32, bf16 or f16/);
    expectOpError(() => addon.addRmsNorm(addon.zeros('f32', [3, 8]), x, w, EPS, out, -8), /^addRmsNorm: next must be an integer >= 0/);
  });

  it('headRmsNorm', () => {
    const qkv = addon.zeros('f32', [2, 8 * 4]); // H 2, K 1, hd 8
    expectOpError(() => addon.headRmsNorm(qkv, w, w, 2, 1, 8.5, EPS), /^headRmsNorm: headDim must be an integer >= 1/);
    expectOpError(() => addon.headRmsNorm(qkv, w, w, 3, 2, 8, EPS), /^headRmsNorm: numHeads \(3\) must be a multiple of numKvHeads \(2\)/);
    expectOpError(() => addon.headRmsNorm(qkv, w, w, 4, 1, 8, EPS), /^headRmsNorm: qkv f32\[2, 32\] must have at least .* = 48 columns/);
    expectOpError(() => addon.headRmsNorm(qkv, w, addon.zeros('bf16', [7]), 2, 1, 8, EPS), /^headRmsNorm: kWeight must be \[8\]/);
    expectOpError(() => addon.headRmsNorm(qkv, w, addon.zeros('f32', [8]), 2, 1, 8, EPS), /^headRmsNorm: qWeight and kWeight must share a dtype/);
    expect(floats(qkv).every((v) => v === 0)).toBe(true);
  });
});
