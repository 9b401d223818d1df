// serve.yaml's engine settings in the shape EngineClient.start takes.
import type { EngineOptions } from '../engine/client.js';
import type { ServeConfig } from './schema.js';

export function engineOptionsOf(config: ServeConfig, onProgress?: (message: string) => void): EngineOptions {
  return {
    model: config.model,
    device: config.device,
    dtype: config.dtype,
    maxModelLen: config.max_seq_len,
    maxBatchSize: config.max_batch_size,
    maxNumBatchedTokens: config.max_num_batched_tokens,
    kvCache: {
      blockSize: config.kv_cache.block_size,
      numBlocks: config.kv_cache.num_blocks,
      memoryFraction: config.kv_cache.memory_fraction,
    },
    prefixCache: config.prefix_cache,
    lora: config.resources.lora && {
      slots: config.resources.lora.slots,
      maxRank: config.resources.lora.max_rank,
      hostCache: config.resources.lora.host_cache,
      sliceSteps: config.resources.lora.slice_steps,
      mergeAfterSteps: config.resources.lora.merge_after_steps,
      targets: config.resources.lora.targets,
      runtimeUpdates: config.resources.lora.runtime_updates,
      adapters: config.resources.lora.adapters,
    },
    onProgress,
  };
}
