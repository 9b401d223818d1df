// The ops that take an adapted projection's output and add each row's delta (LoraDelta:
// ropeKvWrite, siluMul, addRmsNorm) on CUDA against the CPU backend: rows of mixed slots
// (slot 0 and a slot past the table get nothing), a slot of lower rank than the pool's,
// fused slices, widths whose runs of 8 do and do not line up.
import { describe, it } from 'vitest';

import { ACTS, addon, deltaPair, describeGpu, expectClose, floats, i32, onCpu, onCuda, Rng, rounded, tol, withShrink } from './helpers.js';

describeGpu('cuda LoRA deltas', () => {
  describe.each(ACTS)('%s activations', (act) => {
    // 33 x 8192 at rank 16 (and f32's 9 x 8192): rows two a block (over 8 MiB of bT re-read),
    // pairs of one slot and not. bf16 widths of 16 take tensor-core tiles of 8 rows (ranks 8
    // and 32: half a K tile, two tiles); 100 does not.
    const siluCases = [[1, 3072, 16, false], [5, 100, 8, false], [33, 1024, 16, false], [33, 8192, 16, true], [9, 8192, 16, false],
      [7, 256, 8, true], [12, 528, 32, false]] as const;
    // Slices that split a 16-column tile (no layout the pool makes): bf16 takes such a tile an
    // output at a time.
    const oddSlices = (inter: number) => [0, inter - 24, 2 * inter];
    it.each([...siluCases.map((c) => [...c, false] as const), [9, 64, 16, false, true] as const])(
      'siluMul: %i rows, inter %i, rank %i, pairs of one slot %s, odd slices %s', (n, inter, R, pairs, odd) => {
      const rng = new Rng(n + inter + R);
      const d = deltaPair(act, rng, n, odd ? oddSlices(inter) : [0, inter, 2 * inter], R, pairs);
      const y = withShrink(n, 2 * inter, rounded(act, rng.floats(n * 2 * inter, -3, 3)), d.t, d.bCols);
      const cpu = addon.empty('f32', [n, inter]), cuda = addon.empty(act, [n, inter], 'cuda');
      addon.siluMul(cpu, onCpu([n, 2 * inter + d.bCols], y), ...d.cpu);
      addon.siluMul(cuda, onCuda(act, [n, 2 * inter + d.bCols], y), ...d.cuda);
      expectClose(floats(cuda), floats(cpu), 2 * tol(act, true));
    });

    // bf16 at rank 16 or less loads bT's entries before the wait (1040 and 2048: a block's last
    // warp partly past the row, or not); 5120 and 8192 take two runs a thread.
    it.each([[1, 1024, 16], [7, 4096, 16], [3, 132, 8], [40, 256, 8], [3, 1040, 16], [5, 2048, 8], [2, 1024, 32],
      [3, 5120, 16], [2, 8192, 32]])(
      'addRmsNorm: %i rows, dim %i, rank %i', (n, dim, R) => {
      const rng = new Rng(2 * n + dim + R);
      const d = deltaPair(act, rng, n, [0, dim], R);
      const y = withShrink(n, dim, rounded(act, rng.floats(n * dim)), d.t, d.bCols);
      const res = rounded(act, rng.floats(n * dim)), w = rng.floats(dim, 0.5, 1.5);
      const resCpu = onCpu([n, dim], res), outCpu = addon.empty('f32', [n, dim]);
      const resCuda = onCuda(act, [n, dim], res), outCuda = addon.empty(act, [n, dim], 'cuda');
      addon.addRmsNorm(resCpu, onCpu([n, dim + d.bCols], y), onCpu([dim], w), 1e-6, outCpu, ...d.cpu);
      addon.addRmsNorm(resCuda, onCuda(act, [n, dim + d.bCols], y), onCuda('f32', [dim], w), 1e-6, outCuda, ...d.cuda);
      expectClose(floats(resCuda), floats(resCpu), tol(act, true));
      expectClose(floats(outCuda), floats(outCpu), 2 * tol(act, true));
    });

    // bf16 takes tensor-core tiles of 8 tokens a block: 19 tokens end in a partial tile.
    it.each([[1, 4, 2, 128, 16, false], [6, 8, 2, 64, 8, false], [3, 6, 2, 128, 16, false], [19, 4, 2, 128, 32, false],
      [10, 4, 2, 64, 16, true]])('ropeKvWrite: %i rows, %i/%i heads of %i, rank %i, odd slices %s', (n, H, K, hd, R, odd) => {
      const rng = new Rng(3 * n + H + hd + R);
      const qkvW = (H + 2 * K) * hd;
      const d = deltaPair(act, rng, n, odd ? [0, H * hd - 24, (H + K) * hd + 8, qkvW] : [0, H * hd, (H + K) * hd, qkvW], R);
      const y = withShrink(n, qkvW, rounded(act, rng.floats(n * qkvW)), d.t, d.bCols);
      const inv = Float32Array.from({ length: hd / 2 }, (_, i) => 10000 ** (-(2 * i) / hd));
      const norm = rng.floats(hd, 0.5, 1.5), pos = Array.from({ length: n }, (_, i) => 3 * i + 1);
      const slots = Array.from({ length: n }, (_, i) => 2 * i + 1);
      const cache = [4, 16, K, hd];
      const run = (cuda: boolean) => {
        const on = (dt: 'f32' | 'bf16', shape: number[], v: ArrayLike<number>) => (cuda ? onCuda(dt, shape, v) : onCpu(shape, v));
        const ints = (shape: number[], v: number[]) => (cuda ? onCuda('i32', shape, v) : i32(shape, v));
        const qkv = on(act, [n, qkvW + d.bCols], y);
        const k = addon.zeros('f32', cache, cuda ? 'cuda' : 'cpu'), v = addon.zeros('f32', cache, cuda ? 'cuda' : 'cpu');
        const nw = on('f32', [hd], norm);
        addon.ropeKvWrite(qkv, ints([n], pos), on('f32', [hd / 2], inv), k, v, ints([n], slots), nw, nw, H, K, hd, 1e-6,
          ...(cuda ? d.cuda : d.cpu));
        const all = floats(qkv);
        const own = new Float32Array(n * qkvW);
        for (let r = 0; r < n; r++) own.set(all.subarray(r * (qkvW + d.bCols), r * (qkvW + d.bCols) + qkvW), r * qkvW);
        return { own, k: floats(k), v: floats(v) };
      };
      const cpu = run(false), cuda = run(true);
      for (const key of ['own', 'k', 'v'] as const) expectClose(cuda[key], cpu[key], 2 * tol(act, true));
    });
  });
});
