// linearSiluMul on CUDA against the CPU backend: at decode sizes the tensor-core GEMV stores
// SiLU(gate) · up itself (8 outputs a block, gate's and up's rows side by side); past them, or
// where it does not take the shape, linear then siluMul through the scratch. Which of the two
// ran shows in the scratch, and the first equals the second bit for bit. Eager and replayed
// from a graph after the norm that writes x and lets the GEMV launch early, as decode steps run.
import { describe, expect, it } from 'vitest';

import { addon, describeGpu, expectClose, expectSame, floats, onCpu, onCuda, replayOnce, Rng, rounded, tol, weightPair, type Act } from './helpers.js';

const EPS = 1e-6, SENTINEL = 7;

/** Whether the tensor-core GEMV takes gate_up itself (gemv_mma.cu): bf16, no bias, 2 · inter > in, decode rows for its size. */
function fused(act: Act, n: number, inF: number, inter: number, bias: boolean): boolean {
  const small = 2 * inter * inF * 2 < 32 << 20;
  return act === 'bf16' && !bias && 2 * inter > inF && inF % 256 === 0 && (small ? n <= 16 : n >= 2 && n <= 4);
}

describeGpu('linearSiluMul', () => {
  // [in, inter, bias, W's extra columns]: Qwen3-0.6B's gate_up; a last block of fewer than 8
  // outputs; a pool's widened W; a bias (the ops one by one); 2 · inter <= in (x through the
  // GEMV's ring: the ops); a large weight (the GEMV from 2 rows)
  describe.each([[1024, 3072, false, 0], [256, 300, false, 0], [1024, 2048, false, 24], [512, 700, true, 0], [512, 200, false, 0],
    [4096, 4200, false, 0]])('in %i, inter %i, bias %s, W %i columns wider', (inF, inter, withBias, wider) => {
    const rng = new Rng(inF + inter + wider);
    const norm = weightPair('bf16', [inF], rng.floats(inF, 0.5, 1.5));
    const w = weightPair('bf16', [2 * inter, inF + wider], rng.floats(2 * inter * (inF + wider), -0.05, 0.05));
    const bias = withBias ? weightPair('bf16', [2 * inter], rng.floats(2 * inter)) : null;
    const cases: [number, Act][] = [[1, 'bf16'], [2, 'bf16'], [8, 'bf16'], [9, 'bf16'], [16, 'bf16'], [17, 'bf16'], [3, 'f32']];
    it.each(cases)('%i rows, %s activations', (n, act) => {
      const res = rounded(act, rng.floats(n * inF, -2, 2));
      const x = addon.empty('f32', [n, inF]);
      addon.rmsNorm(x, onCpu([n, inF], res), norm.cpu, EPS);
      const cpu = addon.empty('f32', [n, inter]);
      addon.linearSiluMul(cpu, x, w.cpu, bias?.cpu ?? null, addon.empty('f32', [n, 2 * inter]));
      const cuda = { res: onCuda(act, [n, inF], res), x: addon.empty(act, [n, inF], 'cuda'), out: addon.empty(act, [n, inter], 'cuda') };
      const gateUp = addon.empty(act, [n, 2 * inter], 'cuda');
      const step = () => {
        addon.rmsNorm(cuda.x, cuda.res, norm.cuda, EPS, 2 * inter);
        addon.linearSiluMul(cuda.out, cuda.x, w.cuda, bias?.cuda ?? null, gateUp);
      };
      addon.fill(gateUp, SENTINEL);
      step();
      expectClose(floats(cuda.out), floats(cpu), 2 * tol(act, true));
      // The GEMV stores SiLU·mul itself (gateUp left as it was) exactly where gemv_mma.cu takes
      // the shape, and sums and rounds each output as linear then siluMul do: the two agree bit
      // for bit (a tolerance would not tell them apart).
      expect(floats(gateUp).every((v) => v === SENTINEL), 'the gated GEMV, not linear then siluMul').toBe(fused(act, n, inF, inter, withBias));
      const apart = addon.empty(act, [n, inter], 'cuda');
      addon.linear(gateUp, cuda.x, w.cuda, bias?.cuda ?? null, false, 0);
      addon.siluMul(apart, gateUp);
      expectSame(floats(cuda.out), floats(apart));
      addon.fill(cuda.out, 0);
      replayOnce(step);
      expectClose(floats(cuda.out), floats(cpu), 2 * tol(act, true));
    });
  });
});
