// Qwen3: the Llama decoder with an RMSNorm over each q and k head before RoPE.
import type { Tensor } from '../addon/index.js';
import { LlamaModel } from './llama.js';

export class Qwen3Model extends LlamaModel {
  protected override qkNorms(layer: number): [Tensor, Tensor] {
    return [this.w(`layers.${layer}.q_norm`), this.w(`layers.${layer}.k_norm`)];
  }
}
