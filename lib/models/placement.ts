// Where a model runs and in which types: the CPU reference computes in f32; CUDA keeps
// activations and the KV cache in bf16 (as transformers and vLLM do in bf16), accumulating
// in f32 inside every kernel.
import type { DeviceName, FloatDType } from '../addon/index.js';

export interface Placement {
  device: DeviceName;
  /** Activations, logits and LoRA slot weights. */
  act: FloatDType;
  kv: FloatDType;
}

/** Bytes of one element of a float dtype. */
export function floatBytes(dtype: FloatDType): number {
  return dtype === 'f32' ? 4 : 2;
}

export const CPU: Placement = { device: 'cpu', act: 'f32', kv: 'f32' };

export function cudaPlacement(act: FloatDType = 'bf16'): Placement {
  return { device: 'cuda', act, kv: act };
}
