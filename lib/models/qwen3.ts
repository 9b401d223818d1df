// Qwen3: the Llama decoder with an RMSNorm over each q and k head before RoPE.
import { addon, type Tensor } from '../addon/index.js';
import { LlamaModel } from './llama.js';

export class Qwen3Model extends LlamaModel {
  protected override normalizeQk(qkv: Tensor, layer: number): void {
    const c = this.config;
    addon.headRmsNorm(
      qkv, this.w(`layers.${layer}.q_norm`), this.w(`layers.${layer}.k_norm`),
      c.numHeads, c.numKvHeads, c.headDim, c.rmsNormEps,
    );
  }
}
