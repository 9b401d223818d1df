// Shared by the CUDA tests: each op runs on the CPU backend (f32, the exact reference)
// and on CUDA with f32 or bf16 activations, on the same values, and the results are
// compared by relative error.
import { describe } from 'vitest';

import { addon, type DType, type FloatDType, type Tensor } from '../../lib/addon/index.js';
import type { Rng } from '../ops/random.js';

export { addon };
export type { DType, FloatDType, Tensor };
export { expectClose, expectOpError, expectSame, floats, ints, relativeError, withShrink } from '../ops/helpers.js';
export { Rng } from '../ops/random.js';

const devices = addon.cudaDevices();
export const HAS_CUDA = devices.count > 0;
if (!HAS_CUDA) console.warn(`test/gpu: skipped, no usable CUDA device (${devices.error ?? 'none visible'})`);

/** describe() where a CUDA device is usable, describe.skip() elsewhere. */
export const describeGpu: typeof describe = HAS_CUDA ? describe : (describe.skip as typeof describe);

export type Act = 'f32' | 'bf16';
export const ACTS: readonly Act[] = ['f32', 'bf16'];
export const WEIGHT_DTYPES: readonly FloatDType[] = ['f32', 'bf16', 'f16'];

/**
 * How close CUDA must come to the CPU: bf16 activations 1e-2; f32 activations 1e-5, or
 * 1e-4 where the kernel sums in another order than the CPU (dot products, norms, softmax).
 */
export function tol(act: Act, reordered: boolean): number {
  return act === 'bf16' ? 1e-2 : reordered ? 1e-4 : 1e-5;
}

/** The values a tensor of `dtype` holds for `data` (rounded to nearest even), as f32. */
export function rounded(dtype: DType, data: Float32Array): Float32Array {
  if (dtype === 'f32') return data;
  return addon.fromArray(dtype, [data.length], data).toArray() as Float32Array;
}

export function onCpu(shape: number[], data: ArrayLike<number>): Tensor {
  return addon.fromArray('f32', shape, Float32Array.from(data));
}

export function onCuda(dtype: DType, shape: number[], data: ArrayLike<number>): Tensor {
  if (dtype === 'i32') return addon.fromArray('i32', shape, Int32Array.from(data), 'cuda');
  if (dtype === 'i64') return addon.fromArray('i64', shape, BigInt64Array.from(Array.from(data), (v) => BigInt(v)), 'cuda');
  return addon.fromArray(dtype, shape, Float32Array.from(data), 'cuda');
}

export function i32(shape: number[], data: ArrayLike<number>): Tensor {
  return addon.fromArray('i32', shape, Int32Array.from(data));
}

export function i64(shape: number[], data: ArrayLike<number>): Tensor {
  return addon.fromArray('i64', shape, BigInt64Array.from(Array.from(data), (v) => BigInt(v)));
}

/** Runs `step` once as a decode step's graph runs it: captured (nothing runs), replayed, waited for. */
export function replayOnce(step: () => void): void {
  const graph = addon.captureGraph(step);
  try {
    graph.replay();
    addon.synchronize();
  } finally {
    graph.dispose();
  }
}

/** A weight on both devices: the CPU copy and the CUDA copy hold the same (rounded) values. */
export function weightPair(dtype: FloatDType, shape: number[], data: Float32Array): { cpu: Tensor; cuda: Tensor } {
  const cpu = addon.fromArray(dtype, shape, data);
  return { cpu, cuda: cpu.to('cuda') };
}

const DELTA_SLOTS = 4;

/**
 * A LoraDelta's operands for outputs split at `starts`, rank R (4 slots, slot 3 of rank R - 3), on both
 * devices; `pairs`: rows 2i and 2i + 1 share a slot (the ops that share bT's loads among rows).
 */
export function deltaPair(act: 'f32' | 'bf16', rng: Rng, n: number, starts: number[], R: number, pairs = false) {
  const slices = starts.length - 1, out = starts[slices], bCols = DELTA_SLOTS * slices * R;
  const bT = rounded(act, rng.floats(bCols * out, -0.2, 0.2));
  const slots = Array.from({ length: n }, (_, r) => [1, 0, 3, 2, 7][((pairs ? r >> 1 : r) * 3 + 1) % 5]);  // 7: past the table
  const ranks = Array.from({ length: DELTA_SLOTS * slices }, (_, i) => (Math.floor(i / slices) === 3 ? R - 3 : R));
  // Shrink columns past a slot's rank are zero padding, as the GEMM by zero rows of A leaves them.
  const t = rounded(act, rng.floats(n * bCols).map((v, i) => ((i % bCols) % R < ranks[Math.floor((i % bCols) / R)] ? v : 0)));
  return {
    bCols, t,
    cpu: [onCpu([bCols, out], bT), i32([n], slots.map((s) => (s >= DELTA_SLOTS ? 0 : s))), Int32Array.from(starts), i32([DELTA_SLOTS, slices], ranks)] as const,
    cuda: [onCuda(act, [bCols, out], bT), onCuda('i32', [n], slots), Int32Array.from(starts), onCuda('i32', [DELTA_SLOTS, slices], ranks)] as const,
  };
}
