// loraMerge on CUDA against the CPU backend: every float dtype, the tensor-core kernel (bf16,
// k of 16 to 64) and the other, rows not a multiple of either's tile, columns past the other's
// 64 blocks, b beside W in the same tensor (as the pool's widened weight), the columns past W's
// untouched.
import { expect, it } from 'vitest';

import { addon, describeGpu, floats, Rng, tol, WEIGHT_DTYPES, type FloatDType } from './helpers.js';

// [out, in, k, w's columns past in + 2k]: bf16 with k = 16 to 64, in a multiple of 64 and rows
// of w in whole 16-byte runs takes the tensor-core kernel (rows past a warp's 32 or a block's 128,
// a single row block, and 157 row blocks, whose 16 column steps fall to 7 blocks on an H200); the rest
// (13 rows of 1125: k and in fit, the rows do not) the other.
const CASES: [number, number, number, number][] = [
  [6, 10, 3, 5], [13, 1024, 48, 5], [1024, 1024, 16, 0], [16, 20000, 8, 6], [24, 96, 1536, 6],
  [40, 192, 16, 0], [70, 128, 32, 0], [33, 1024, 48, 0], [100, 4096, 64, 8], [300, 256, 64, 0], [20000, 1024, 16, 0],
];

describeGpu('cuda loraMerge', () => {
  for (const dt of WEIGHT_DTYPES) for (const [out, inF, k, pad] of CASES) {
    it(`${dt}: ${out} rows, in ${inF}, k ${k}, rows of ${inF + 2 * k + pad}, b beside W`, () => {
      const rng = new Rng(out + inF + k);
      const width = inF + 2 * k + pad, aRows = k + 3, aRow = 2, bCol = inF + k;
      const w = addon.fromArray(dt, [out, width], rng.floats(out * width, -0.05, 0.05));
      const base = addon.fromArray(dt, [out, inF], rng.floats(out * inF, -0.05, 0.05));
      const a = addon.fromArray(dt, [aRows, inF], rng.floats(aRows * inF, -0.1, 0.1));
      const before = floats(w);
      const onCuda = (t: typeof w) => t.to('cuda');
      const wc = onCuda(w);
      addon.loraMerge(w, base, w, bCol, a, aRow, k);
      addon.loraMerge(wc, onCuda(base), wc, bCol, onCuda(a), aRow, k);
      const got = floats(wc), want = floats(w);
      // Both sum in f32 and round once to dt: bf16 and f16 at most one rounding apart; f32 the
      // sums' own error (FMAs on the GPU; k up to 1536 products cancelling), as tol() allows.
      const ulp = (dt as FloatDType) === 'f32' ? tol('f32', true) : dt === 'bf16' ? 2 ** -7 : 2 ** -10;
      let worst = 0;
      for (let j = 0; j < got.length; j++) {
        const col = j % width;
        if (col >= inF) expect(got[j]).toBe(before[j]);
        else worst = Math.max(worst, Math.abs(got[j] - want[j]) / Math.max(Math.abs(want[j]), 1e-3));
      }
      expect(worst).toBeLessThanOrEqual(ulp);
    });
  }
});
