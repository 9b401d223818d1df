// loraMerge: an adapter merged into its weight, w = base + b · a in f32, rounded once, on the
// CPU backend (test/gpu/lora_merge.test.ts checks the CUDA kernel against it). Refused calls
// change nothing.
import { describe, expect, it } from 'vitest';

import { addon, expectClose, expectOpError, expectSame, f32, floats, weights, type FloatDType } from './helpers.js';
import { Rng } from './random.js';

const [out, inF, k] = [6, 10, 3];

/** base + b[:, bCol..bCol+k] · a[aRow..aRow+k, :in] in f64 (the reference), per element of [out, in]. */
function merged(base: Float32Array, b: Float32Array, ldb: number, bCol: number, a: Float32Array, lda: number, aRow: number): Float64Array {
  const want = new Float64Array(out * inF);
  for (let o = 0; o < out; o++) {
    for (let i = 0; i < inF; i++) {
      let s = 0;
      for (let c = 0; c < k; c++) s += b[o * ldb + bCol + c] * a[(aRow + c) * lda + i];
      want[o * inF + i] = base[o * inF + i] + s;
    }
  }
  return want;
}

describe('loraMerge', () => {
  for (const dtype of ['f32', 'bf16'] as FloatDType[]) {
    it(`writes base + b · a into w's first columns, the rest of w untouched (${dtype})`, () => {
      const rng = new Rng(3);
      const width = inF + 2 * k + 1, ldb = 9, lda = inF + 4, aRow = 2, bCol = 4;
      const base = weights(dtype, [out, inF], rng.floats(out * inF));
      const b = weights(dtype, [out, ldb], rng.floats(out * ldb));
      const a = weights(dtype, [aRow + k + 1, lda], rng.floats((aRow + k + 1) * lda));
      const before = weights(dtype, [out, width], rng.floats(out * width));
      addon.loraMerge(before.tensor, base.tensor, b.tensor, bCol, a.tensor, aRow, k);
      const got = floats(before.tensor);
      const want = merged(base.values, b.values, ldb, bCol, a.values, lda, aRow);
      const firstCols = (x: ArrayLike<number>) => Array.from({ length: out * inF }, (_, j) => x[Math.floor(j / inF) * width + (j % inF)]);
      // f32: the sums' rounding alone; bf16: one rounding of each element (2^-8 of it, relative).
      if (dtype === 'f32') expectClose(firstCols(got), want, 1e-6);
      else firstCols(got).forEach((v, j) => expect(Math.abs(v - want[j])).toBeLessThanOrEqual(Math.abs(want[j]) * 2 ** -8 + 1e-7));
      for (let o = 0; o < out; o++) {
        expectSame(got.subarray(o * width + inF, (o + 1) * width), before.values.subarray(o * width + inF, (o + 1) * width));
      }
    });
  }

  it("takes b from w's own columns past in (the pool's b beside W)", () => {
    const rng = new Rng(5);
    const width = inF + 2 * k;
    const wv = rng.floats(out * width), base = rng.floats(out * inF), av = rng.floats(k * inF);
    const w = f32([out, width], wv);
    addon.loraMerge(w, f32([out, inF], base), w, inF + k, f32([k, inF], av), 0, k);
    const got = floats(w);
    const want = merged(base, wv, width, inF + k, av, inF, 0);
    expectClose(Array.from({ length: out * inF }, (_, j) => got[Math.floor(j / inF) * width + (j % inF)]), want, 1e-6);
    expectSame(got.subarray(inF, width), wv.subarray(inF, width));  // b itself unchanged
  });

  it('refuses operands that do not fit or overlap what it writes, changing nothing', () => {
    const rng = new Rng(9);
    const width = inF + k, wv = rng.floats(out * width);
    const w = f32([out, width], wv), base = f32([out, inF], rng.floats(out * inF)), a = f32([k, inF], rng.floats(k * inF));
    expectOpError(() => addon.loraMerge(w, base, w, 2, a, 0, k), /^loraMerge: b .* overlaps w's first 10 columns/);
    expectOpError(() => addon.loraMerge(w, base, w, inF + 1, a, 0, k), /^loraMerge: b .+ has no 3 columns from 11 for 6 rows/);
    expectOpError(() => addon.loraMerge(w, base, w, inF, a, 1, k), /^loraMerge: a .+ has no 3 rows of 10 from row 1/);
    expectOpError(() => addon.loraMerge(w, f32([out, width + 1], new Float32Array(out * (width + 1))), w, inF, a, 0, k),
      /^loraMerge: w .+ does not hold base/);
    expectOpError(() => addon.loraMerge(w, addon.zeros('bf16', [out, inF]), w, inF, a, 0, k), /^loraMerge: base .+ is not of w's dtype/);
    expectOpError(() => addon.loraMerge(w, w.narrow(0, 2), w, inF, a, 0, k), /does not hold base|shares memory/);
    expectSame(floats(w), wv);
  });
});
