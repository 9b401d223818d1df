// Shared by the CUDA tests: each op runs on the CPU backend (f32, the exact reference)
// and on CUDA with f32 or bf16 activations, on the same values, and the results are
// compared by relative error.
import { describe } from 'vitest';

import { addon, type DType, type FloatDType, type Tensor } from '../../lib/addon/index.js';

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

/** A weight on both devices: the CPU copy and the CUDA copy hold the same (rounded) values. */
export function weightPair(dtype: FloatDType, shape: number[], data: Float32Array): { cpu: Tensor; cuda: Tensor } {
  const cpu = addon.fromArray(dtype, shape, data);
  return { cpu, cuda: cpu.to('cuda') };
}
