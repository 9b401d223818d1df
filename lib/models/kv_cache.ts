// The paged KV cache of a model: per layer, k and v as [blocks, blockSize, kvHeads, headDim].
import { addon, type Tensor } from '../addon/index.js';
import type { ModelConfig } from '../checkpoint/config.js';

export class KvCache {
  readonly k: Tensor[];
  readonly v: Tensor[];

  constructor(config: ModelConfig, readonly numBlocks: number, readonly blockSize: number) {
    const shape = [numBlocks, blockSize, config.numKvHeads, config.headDim];
    // Not zeroed: attention only reads slots kvWrite has filled, and untouched pages cost nothing.
    this.k = Array.from({ length: config.numLayers }, () => addon.empty('f32', shape));
    this.v = Array.from({ length: config.numLayers }, () => addon.empty('f32', shape));
  }

  /** Bytes one cached token takes across all layers. */
  static bytesPerToken(config: ModelConfig): number {
    return 2 * config.numLayers * config.numKvHeads * config.headDim * 4;
  }

  dispose(): void {
    for (const t of [...this.k, ...this.v]) t.dispose();
  }
}
