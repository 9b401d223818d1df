// The memory plan (what memory_fraction leaves for the KV cache) counts the adapter pool on CUDA
// as it is allocated: bf16 weights, and f32 weights beside bf16 activations, whose b beside W
// and A beneath it are f32 (4 bytes, where the activations' are 2), with merging's copy too;
// the loaded weights' dtypes, when given, stand in for the dtype option.
import { expect, it } from 'vitest';

import { memoryBesidesKv } from '../../lib/engine/memory.js';
import { ALL_TARGETS } from '../../lib/lora/adapter.js';
import { MergedWeights } from '../../lib/lora/merged_weights.js';
import { SlotWeights } from '../../lib/lora/slot_weights.js';
import { cudaPlacement, loadModel } from '../../lib/models/index.js';
import { FIXTURES } from '../parity/fixture.js';
import { describeGpu } from './helpers.js';

describeGpu('the memory plan on cuda', () => {
  for (const dtype of ['bf16', 'f32'] as const) {
    it(`counts the adapter pool and merging's copy as allocated: ${dtype} weights, bf16 activations`, () => {
      const placement = cudaPlacement('bf16');
      const model = loadModel(`${FIXTURES}/models/tiny-qwen3`, { placement, dtype });
      const lora = { slots: 3, maxRank: 8, hostCache: 3, targets: [...ALL_TARGETS], adapters: [], mergeAfterSteps: 8 };
      const options = {
        model: '', device: 'cuda' as const, dtype, maxBatchSize: 4, maxNumBatchedTokens: 64,
        kvCache: { blockSize: 16, numBlocks: 8 }, prefixCache: true, lora,
      };
      const pool = new SlotWeights(model.config, lora.slots + 1, lora.maxRank, new Set(lora.targets), model.weights, placement);
      const merged = new MergedWeights(pool);
      try {
        expect(pool.targets.get('layers.0.down')!.bAll.dtype).toBe(dtype);
        expect(memoryBesidesKv(model.config, options, placement, false).loraPool).toBe(pool.bytes + merged.bytes);
        // Planned from the loaded weights, without the dtype option (tiny-qwen3 names no torch_dtype).
        expect(memoryBesidesKv(model.config, { ...options, dtype: undefined }, placement, false, model.weights).loraPool).toBe(pool.bytes + merged.bytes);
      } finally {
        merged.dispose();
        pool.dispose();
        model.weights.forEach((t) => t.dispose());
      }
    });
  }
});
