// rmsNormLinear on CUDA against the CPU backend: at decode sizes the tensor-core GEMV norms the
// residual itself (the norm weight times each x on its way into the mma, the row's scale on
// the outputs), plain or gated (SiLU·mul of gate_up); elsewhere rmsNorm into x, then linear or
// linearSiluMul. Which ran shows in x (the fused GEMV leaves it as it was). The fused form
// rounds x · w where the ops round the normed x, so the two agree to bf16's step, not bit for
// bit. Eager, and replayed from a graph.
import { describe, expect, it } from 'vitest';

import { addon, describeGpu, expectClose, floats, onCpu, onCuda, replayOnce, Rng, rounded, tol, weightPair, type Act } from './helpers.js';

const EPS = 1e-6, SENTINEL = 7;

/**
 * Whether the tensor-core GEMV takes the op itself (gemv_mma.cu's gemvMmaFit and RowNorm), or
 * undefined where that depends on the device: a large weight's grid (a thousand blocks) with
 * the norm fits an SM count that an H200's 132 SMs do not. A small weight's (at most 384 blocks
 * here, 5 an SM) fits an H200.
 */
function fused(act: Act, n: number, inF: number, rows: number, gated: boolean, bias: boolean, normBf16: boolean): boolean | undefined {
  if (act !== 'bf16' || !normBf16 || inF % 256 !== 0 || inF > 8192 || (gated && (bias || rows <= inF || n > 16))) return false;
  if (!gated && n <= 2) return false;  // a plain projection from 3 rows (norm_linear.cu)
  const small = rows * inF * 2 < 32 << 20;
  if (small) return n >= 1 && n <= (rows <= inF ? 32 : 16);
  return n >= 2 && n <= 4 ? undefined : false;
}

describeGpu('rmsNormLinear', () => {
  // [in, out (gated: inter), gated, bias, W's extra columns, norm weight dtype]: Qwen3-0.6B's qkv
  // and gate_up; out <= in (x through the GEMV's ring); a pool's widened W; a bias and a last
  // block of 16 part-filled; a bias gated (the ops); a last gated block of fewer than 8; large
  // weights (the GEMV from 2 rows; the second Qwen3-8B's in, 2 blocks an SM on an H200); more
  // steps along in than the ring's 8 stages, with x through L1 and through the ring; an f32
  // norm weight (the ops)
  describe.each([
    [1024, 4096, false, false, 0, 'bf16'], [1024, 3072, true, false, 0, 'bf16'], [2048, 1024, false, false, 0, 'bf16'],
    [1024, 2048, false, false, 24, 'bf16'], [512, 700, false, true, 0, 'bf16'], [512, 700, true, true, 0, 'bf16'],
    [256, 300, true, false, 0, 'bf16'], [2048, 4200, true, false, 0, 'bf16'], [4096, 4200, true, false, 0, 'bf16'],
    [2560, 3000, false, false, 0, 'bf16'], [4096, 1024, false, false, 0, 'bf16'], [1024, 3072, true, false, 0, 'f32'],
  ] as const)('in %i, out %i, gated %s, bias %s, W %i columns wider, %s norm', (inF, outF, gated, withBias, wider, normDtype) => {
    const rng = new Rng(inF + outF + wider + (gated ? 1 : 0));
    const rows = gated ? 2 * outF : outF;
    const norm = weightPair(normDtype, [inF], rng.floats(inF, 0.5, 1.5));
    const w = weightPair('bf16', [rows, inF + wider], rng.floats(rows * (inF + wider), -0.05, 0.05));
    const bias = withBias ? weightPair('bf16', [rows], rng.floats(rows)) : null;
    const cases: [number, Act][] = [
      [1, 'bf16'], [2, 'bf16'], [3, 'bf16'], [8, 'bf16'], [9, 'bf16'], [16, 'bf16'], [17, 'bf16'], [33, 'bf16'], [3, 'f32'],
    ];
    it.each(cases)('%i rows, %s activations', (n, act) => {
      const res = rounded(act, rng.floats(n * inF, -2, 2));
      const cpu = addon.empty('f32', [n, outF]);
      const scratch = gated ? [addon.empty('f32', [n, rows])] : [];
      addon.rmsNormLinear(cpu, onCpu([n, inF], res), norm.cpu, EPS, w.cpu, bias?.cpu ?? null, addon.empty('f32', [n, inF]), ...scratch);
      const cuda = { res: onCuda(act, [n, inF], res), x: addon.empty(act, [n, inF], 'cuda'), out: addon.empty(act, [n, outF], 'cuda') };
      const gateUp = gated ? [addon.empty(act, [n, rows], 'cuda')] : [];
      const step = () => addon.rmsNormLinear(cuda.out, cuda.res, norm.cuda, EPS, w.cuda, bias?.cuda ?? null, cuda.x, ...gateUp);
      addon.fill(cuda.x, SENTINEL);
      step();
      expectClose(floats(cuda.out), floats(cpu), 2 * tol(act, true));
      const expected = fused(act, n, inF, rows, gated, withBias, normDtype === 'bf16');
      if (expected !== undefined)
        expect(floats(cuda.x).every((v) => v === SENTINEL), 'the GEMV normed the residual itself').toBe(expected);
      // The ops one by one on CUDA: the same to bf16's step.
      const apart = addon.empty(act, [n, outF], 'cuda');
      addon.rmsNorm(cuda.x, cuda.res, norm.cuda, EPS);
      if (gated) addon.linearSiluMul(apart, cuda.x, w.cuda, bias?.cuda ?? null, gateUp[0]);
      else addon.linear(apart, cuda.x, w.cuda, bias?.cuda ?? null, false, 0);
      expectClose(floats(cuda.out), floats(apart), 2 * tol(act, true));
      addon.fill(cuda.out, 0);
      replayOnce(step);
      expectClose(floats(cuda.out), floats(cpu), 2 * tol(act, true));
    });
  });
});
