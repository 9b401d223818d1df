// loraMerge on CUDA against the CPU backend: every float dtype, rows not a multiple of the
// kernel's 8, columns past its 64 blocks × 256 threads, b beside W in the same tensor (as the
// pool's widened weight), the columns past W's untouched.
import { expect, it } from 'vitest';

import { addon, describeGpu, floats, Rng, tol, WEIGHT_DTYPES, type FloatDType } from './helpers.js';

// [out, in, k]
const CASES: [number, number, number][] = [[6, 10, 3], [13, 1024, 48], [1024, 1024, 16], [16, 20000, 8], [24, 96, 1536]];

describeGpu('cuda loraMerge', () => {
  for (const dt of WEIGHT_DTYPES) for (const [out, inF, k] of CASES) {
    it(`${dt}: ${out} rows, in ${inF}, k ${k}, b beside W`, () => {
      const rng = new Rng(out + inF + k);
      const width = inF + 2 * k + 5, aRows = k + 3, aRow = 2, bCol = inF + k;
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
