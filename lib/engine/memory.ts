// What the engine allocates besides the weights and the KV cache, known before it allocates
// any of it: kv_cache.memory_fraction sizes the cache from what is left, so that a large
// adapter pool or batch makes a clear error at start, not an out-of-memory one later.
import type { FloatDType } from '../addon/index.js';
import type { ModelConfig } from '../checkpoint/config.js';
import type { LoraOptions } from '../lora/manager.js';
import { mergeCopyBytes, poolWidths, slotWeightsBytes } from '../lora/slot_weights.js';
import type { Weights } from '../models/weights.js';
import type { Placement } from '../models/placement.js';
import { workspaceBytes } from '../models/workspace.js';
import { graphBuckets } from './graph_inputs.js';
import type { EngineOptions } from './options.js';

/**
 * On CUDA, room kept for what is allocated per use and not counted here: cuBLASLt's 32 MiB
 * workspace and the output its algorithm choice is timed into (at most 64 rows of a
 * projection: 19 MiB for a 152k vocabulary), the sampler's and attention's scratch (decode
 * attention keeps 32 MiB for its splits' partials and 4 MiB of tickets), the captured graphs'
 * own memory.
 */
export const CUDA_SCRATCH_BYTES = 256 * 2 ** 20;

export interface MemoryPlan {
  /** The adapter pool's slots (slot 0 included). */
  loraPool: number;
  /** The eager steps' activations, and the graph steps' (CUDA graphs on). */
  activations: number;
  scratch: number;
}

/**
 * `weights`: the model's, as loaded, whose dtypes the pool's widened weights follow; without
 * them (a plan made before loading), the dtype option's, else config.json's torch_dtype.
 */
export function memoryBesidesKv(
  config: ModelConfig, o: Omit<EngineOptions, 'lora'> & { maxNumBatchedTokens: number; lora?: LoraOptions }, placement: Placement,
  graphs: boolean, weights?: Weights,
): MemoryPlan {
  const targets = o.lora && new Set(o.lora.targets);
  const named: FloatDType = o.dtype ?? (config.torchDtype === 'float32' ? 'f32' : config.torchDtype === 'float16' ? 'f16' : 'bf16');
  const dtypeOf = (name: string) => (weights?.get(name)?.dtype as FloatDType | undefined) ?? named;
  const loraPool = o.lora ? slotWeightsBytes(config, o.lora.slots + 1, o.lora.maxRank, targets!, placement, dtypeOf) +
    (o.lora.mergeAfterSteps !== undefined ? mergeCopyBytes(config, o.lora.maxRank, targets!, placement, dtypeOf) : 0) : 0;
  const widths = o.lora ? poolWidths(config, o.lora.slots + 1, o.lora.maxRank, targets!) : undefined;
  const cuda = placement.device === 'cuda';
  const graphRows = cuda && graphs ? graphBuckets(o.maxBatchSize, o.maxNumBatchedTokens).at(-1) ?? 0 : 0;
  const activations = workspaceBytes(config, placement, o.maxNumBatchedTokens, o.maxBatchSize, widths) +
    (graphRows > 0 ? workspaceBytes(config, placement, graphRows, graphRows, widths) : 0);
  return { loraPool, activations, scratch: cuda ? CUDA_SCRATCH_BYTES : 0 };
}

export function totalBytes(m: MemoryPlan): number {
  return m.loraPool + m.activations + m.scratch;
}
