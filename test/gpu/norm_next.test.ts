// A decode norm told the width of the projection after it (next), then that projection, on
// CUDA against the CPU backend: where the tensor-core GEMV takes the projection, the norm lets
// it launch before the norm ends, and the GEMV must still read the norm's finished output. Eager and replayed from a graph, as decode steps run.
import { describe, it } from 'vitest';

import {
  addon, deltaPair, describeGpu, expectClose, floats, onCpu, onCuda, replayOnce, Rng, rounded, tol, weightPair, withShrink,
  type Tensor,
} from './helpers.js';

const EPS = 1e-6;

describeGpu('a decode norm with the next projection\'s width', () => {
  // [dim, out]: a small weight (the GEMV from 1 row), one where out <= in (x through its
  // ring), a large one (2-4 rows; otherwise the norm waits)
  describe.each([[1024, 4096], [1024, 512], [4096, 4200]])('in %i, out %i', (dim, out) => {
    it.each([[1, false], [2, false], [4, false], [16, false], [1, true], [3, true], [8, true]])(
      '%i rows, after a projection with a delta %s', (n, withDelta) => {
      const rng = new Rng(n + dim + out);
      const norm = weightPair('bf16', [dim], rng.floats(dim, 0.5, 1.5));
      const proj = weightPair('bf16', [out, dim], rng.floats(out * dim, -0.05, 0.05));
      const res = rounded('bf16', rng.floats(n * dim, -2, 2));
      const d = deltaPair('bf16', rng, n, [0, dim], 16);
      const y = withDelta ? withShrink(n, dim, rounded('bf16', rng.floats(n * dim)), d.t, d.bCols) : rounded('bf16', rng.floats(n * dim));
      const yCols = withDelta ? dim + d.bCols : dim;
      const cpu = { res: onCpu([n, dim], res), x: addon.empty('f32', [n, dim]), out: addon.empty('f32', [n, out]) };
      addon.addRmsNorm(cpu.res, onCpu([n, yCols], y), norm.cpu, EPS, cpu.x, ...(withDelta ? d.cpu : []));
      addon.linear(cpu.out, cpu.x, proj.cpu, null);
      const cuda = { y: onCuda('bf16', [n, yCols], y), x: addon.empty('bf16', [n, dim], 'cuda'), out: addon.empty('bf16', [n, out], 'cuda') };
      const step = (residual: Tensor) => {
        addon.addRmsNorm(residual, cuda.y, norm.cuda, EPS, cuda.x, ...(withDelta ? [...d.cuda, out] as const : [out] as const));
        addon.linear(cuda.out, cuda.x, proj.cuda, null);
        addon.rmsNorm(cuda.x, residual, norm.cuda, EPS, out);  // the first layer's norm, then the same projection
        addon.linear(cuda.out, cuda.x, proj.cuda, null, true);
      };
      // CPU: out = x · Wᵀ + rmsNorm(residual) · Wᵀ with the updated residual
      const again = addon.empty('f32', [n, dim]);
      addon.rmsNorm(again, cpu.res, norm.cpu, EPS);
      addon.linear(cpu.out, again, proj.cpu, null, true);
      const eager = onCuda('bf16', [n, dim], res);
      step(eager);
      expectClose(floats(cuda.out), floats(cpu.out), 2 * tol('bf16', true));
      const replayed = onCuda('bf16', [n, dim], res);
      replayOnce(() => step(replayed));
      expectClose(floats(replayed), floats(cpu.res), tol('bf16', true));
      expectClose(floats(cuda.out), floats(cpu.out), 2 * tol('bf16', true));
    });
  });
});
