// The paged KV cache of a model: per layer, k and v as [blocks, blockSize, kvHeads, headDim].
import { addon, type Tensor } from '../addon/index.js';
import type { ModelConfig } from '../checkpoint/config.js';
import { CPU, floatBytes, type Placement } from './placement.js';

export class KvCache {
  readonly k: Tensor[];
  readonly v: Tensor[];

  constructor(config: ModelConfig, readonly numBlocks: number, readonly blockSize: number, placement: Placement = CPU) {
    const shape = [numBlocks, blockSize, config.numKvHeads, config.headDim];
    // Not zeroed: attention only reads slots kvWrite has filled, and untouched pages cost nothing.
    const make = () => addon.empty(placement.kv, shape, placement.device);
    this.k = Array.from({ length: config.numLayers }, make);
    this.v = Array.from({ length: config.numLayers }, make);
  }

  /** Bytes one cached token takes across all layers. */
  static bytesPerToken(config: ModelConfig, placement: Placement = CPU): number {
    return 2 * config.numLayers * config.numKvHeads * config.headDim * floatBytes(placement.kv);
  }

  dispose(): void {
    for (const t of [...this.k, ...this.v]) t.dispose();
  }
}
