// What bench/gemv.mjs and bench/lora_ops.mjs share: ops timed inside a captured graph (as a
// decode step runs them: no launch gaps), over copies of their weights that together pass
// L2 (a step reads its weights from HBM, not from the last call's cache).
import { addon } from '../dist/lib/addon/index.js';
import { median } from './median.mjs';

/**
 * Median µs per call of op(i), i = 0 .. calls - 1, replaying a graph of the calls `reps` times.
 * op(0) runs once eagerly first, with gemmTuning on as in the engine's warm-up steps: cuBLASLt's
 * algorithm choices, handle and workspace are made outside a capture
 * (captured first, a GEMM runs the addon's own tiled kernel: lora_ops.mjs's qkv GEMM at 8-32
 * rows timed ~97 µs on Qwen3-0.6B's shape).
 */
export function graphTimedUs(calls, op, reps = 7) {
  const graph = warmCapture(calls, op);
  graph.replay();
  addon.synchronize();
  const samples = [];
  for (let r = 0; r < reps; r++) {
    const t0 = performance.now();
    graph.replay();
    addon.synchronize();
    samples.push((performance.now() - t0) / calls);
  }
  graph.dispose();
  return median(samples) * 1e3;
}

/** Copies of a 2-D device tensor, enough of them (at least `least`, at most `most`) to pass `bytes`. */
export function copiesPast(one, bytes, least = 2, most = 256) {
  const size = one.shape.reduce((a, b) => a * b, 1) * (one.dtype === 'f32' ? 4 : 2);
  const count = Math.min(most, Math.max(least, Math.ceil(bytes / size)));
  return Array.from({ length: count }, () => {
    const c = addon.empty(one.dtype, one.shape, 'cuda');
    addon.copyRegion(c, one, 0, 0, 1, false);
    return c;
  });
}

/**
 * A graph of op(0) .. op(calls - 1), after op(0) ran once eagerly with gemmTuning on, as the
 * engine's graph warm-up (see graphTimedUs).
 */
export function warmCapture(calls, op) {
  addon.gemmTuning(true);  // as the engine's graph warm-up: cuBLASLt's pick for each shape timed
  try {
    op(0);
  } finally {
    addon.gemmTuning(false);
  }
  addon.synchronize();
  return addon.captureGraph(() => { for (let i = 0; i < calls; i++) op(i); });
}
