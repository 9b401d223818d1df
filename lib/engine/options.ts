// How the engine is asked to start, and how its KV cache is sized from that.
import { freemem } from 'node:os';

import { addon } from '../addon/index.js';
import type { ModelConfig } from '../checkpoint/config.js';
import { KvCache } from '../models/kv_cache.js';
import type { Placement } from '../models/placement.js';
import type { Weights } from '../models/weights.js';
import type { LoraOptions } from '../lora/manager.js';
import { poolTargets, type PoolTargetSettings } from '../lora/pool_targets.js';
import type { EngineLimits } from './engine.js';
import { envSwitch } from './env_switch.js';
import { memoryBesidesKv, totalBytes, type MemoryPlan } from './memory.js';

/** serve.yaml's LoRA settings: the pool's, and its targets by poolTargets' rule. */
export type LoraSettings = Omit<LoraOptions, 'targets'> & PoolTargetSettings;

export interface EngineOptions {
  /** A Hugging Face checkpoint folder. */
  model: string;
  device: 'auto' | 'cpu' | 'cuda';
  dtype?: 'bf16' | 'f16' | 'f32';
  maxModelLen?: number;
  maxBatchSize: number;
  /** Tokens a step takes at most (longer prompts are prefilled in chunks); default: batchedTokensDefault. */
  maxNumBatchedTokens?: number;
  kvCache: { blockSize: number; numBlocks?: number; memoryFraction?: number };
  prefixCache: boolean;
  /** LoRA pool; absent means LoRA is off (no adapter code runs). */
  lora?: LoraSettings;
  onProgress?: (message: string) => void;
  /** Decode steps as replayed CUDA graphs on cuda (default true; MSTAR_CUDA_GRAPHS=0 turns them off). */
  cudaGraphs?: boolean;
  /** Decode steps enqueued before the previous one's samples are read (default: on cuda; MSTAR_OVERLAP=0 turns it off). */
  overlapSteps?: boolean;
  /** Each request's first output carries its times on the engine thread (EngineTrace; default: MSTAR_TRACE). */
  trace?: boolean;
}

/** What the options ask for cannot be met by this model or machine (the server names its config file). */
export class LimitsError extends Error {
  override name = 'LimitsError';
}

/**
 * Whether decode steps may use CUDA graphs: MSTAR_CUDA_GRAPHS=0 turns them off whatever the
 * option says (a switch for ruling them out when debugging); otherwise the option, default on.
 */
export function cudaGraphsSetting(option: boolean | undefined, env: NodeJS.ProcessEnv = process.env): boolean {
  if (envSwitch('MSTAR_CUDA_GRAPHS', env) === false) return false;
  return option ?? true;
}

/**
 * Whether the engine enqueues each decode step before it reads the previous one's samples
 * (Engine): MSTAR_OVERLAP=0 turns it off whatever the option says; otherwise the option,
 * by default on wherever the model is on cuda (on the cpu every op runs as it is called,
 * so there is nothing to overlap).
 */
export function overlapSetting(option: boolean | undefined, cuda: boolean, env: NodeJS.ProcessEnv = process.env): boolean {
  if (envSwitch('MSTAR_OVERLAP', env) === false) return false;
  return option ?? cuda;
}

/**
 * From how many rows a step's adapters shrink and expand by GEMMs over every slot at once
 * instead of the per-row kernels (LlamaModel.loraGemmRows): MSTAR_LORA_GEMM_ROWS, a
 * tuning knob for benchmarks; by default 2^20 / hiddenSize rows, at most 1024. The per-row
 * path has two fewer launches a projection, but its deltas re-read the slot's b for every
 * row, work that grows with rows × width; the GEMM path's extra work hardly grows with the
 * rows. One adapter, bench/prefill_step.mjs on an H200, GPU ms per-row / GEMM path:
 * Qwen3-0.6B (hidden 1024) 256 rows 2.16 / 2.50, 512 rows 2.88 / 2.80, with its eager step
 * done sooner on the per-row path up to 1024 rows (3.46 / 4.73 ms at 512: host-bound);
 * Qwen3-8B (hidden 4096) 128 rows 6.46 / 6.86, 256 rows 8.81 / 8.57, 512 rows 15.46 / 13.49
 * (LoRA off 11.57). At 4096 rows the GEMMs win at either size.
 */
export function loraGemmRowsSetting(hiddenSize: number, env: NodeJS.ProcessEnv = process.env): number {
  const raw = env.MSTAR_LORA_GEMM_ROWS?.trim();
  if (!raw) return Math.min(1024, Math.round(2 ** 20 / hiddenSize));
  const rows = raw === 'inf' ? Infinity : Number(raw);
  if (!(rows >= 1)) throw new Error(`MSTAR_LORA_GEMM_ROWS=${raw} is not understood: use a row count, or inf`);
  return rows;
}

/** MSTAR_PROFILE=1: the model runner times its steps and prints a summary (every 1000 steps, and at close). */
export function profileSetting(env: NodeJS.ProcessEnv = process.env): boolean {
  return envSwitch('MSTAR_PROFILE', env) === true;
}

/** Without a size in the options, the cache holds every batch row at full length, within
 * (on the CPU) a quarter of free memory and at most 2 GiB, or (on CUDA) 16 GiB. */
const CPU_MAX_KV_BYTES = 2 * 2 ** 30;
const CUDA_MAX_KV_BYTES = 16 * 2 ** 30;
/** Tokens the CUDA attention kernels can address in a cache (rows counted in 32 bits). */
const CUDA_MAX_KV_TOKENS = 2 ** 31 - 1;

/**
 * max_num_batched_tokens when the config gives none: vLLM's defaults for its OpenAI server,
 * 8192 on a CUDA device of 70 GiB or more (H100, H200) and 2048 elsewhere (vLLM also keeps
 * 2048 on an 80 GiB A100, which it tells by name). At 2048 a 4096-token prompt took two
 * steps (Qwen3-0.6B on an H200: TTFT 24.9 ms, its one-step forward 16.5 ms).
 */
export function batchedTokensDefault(cuda: boolean, deviceBytes: number): number {
  return cuda && deviceBytes >= 70 * 2 ** 30 ? 8192 : 2048;
}

/** Free and total bytes of the memory the cache goes to: the device's on CUDA, else the host's free memory (as both). */
export type MemoryInfo = () => { free: number; total: number };

function memoryOf(cuda: boolean): MemoryInfo {
  return cuda ? () => addon.cudaMemInfo() : () => ({ free: freemem(), total: freemem() });
}

const gib = (b: number) => `${(b / 2 ** 30).toFixed(2)} GiB`;

/** What besides the cache takes memory, for error messages. */
function besidesText(b: MemoryPlan, cuda: boolean): string {
  return `the adapter pool takes ${gib(b.loraPool)}, activations ${gib(b.activations)}${cuda ? `, scratch ${gib(b.scratch)}` : ''}`;
}

/**
 * kv_cache.memory_fraction, as vLLM's gpu_memory_utilization: the share of the device's whole
 * memory the engine may use, less what it uses already (the weights, loaded before this is
 * asked) and what it will allocate besides the cache (`besides`). On the CPU: that share of
 * the free memory, less `besides`.
 */
function memoryShare(fraction: number, cuda: boolean, besides: MemoryPlan, { free, total }: ReturnType<MemoryInfo>): number {
  const used = total - free;
  const bytes = fraction * total - used - totalBytes(besides);
  if (bytes <= 0) {
    throw new LimitsError(`kv_cache.memory_fraction ${fraction} (${gib(fraction * total)} of ${cuda ? "the device's" : 'the free'} ${gib(total)}) leaves no room for the KV cache: ` +
      `${cuda ? `${gib(used)} in use already (the weights), ` : ''}${besidesText(besides, cuda)}`);
  }
  return bytes;
}

/**
 * The engine's limits from its options and the model. `memory` tells what memory there is
 * (the device's after the weights are loaded, on CUDA): memory_fraction sizes the cache from
 * it, and on CUDA a cache sized otherwise must fit in what is free besides the rest.
 * `weights`: the loaded model's, so that the adapter pool is planned in their dtypes.
 */
export function engineLimits(
  config: ModelConfig, o: EngineOptions, placement: Placement, { memory, weights }: { memory?: MemoryInfo; weights?: Weights } = {},
): EngineLimits {
  const maxModelLen = o.maxModelLen ?? config.maxPositionEmbeddings;
  if (maxModelLen > config.maxPositionEmbeddings) {
    throw new LimitsError(`max_seq_len ${maxModelLen} is above the model's max_position_embeddings (${config.maxPositionEmbeddings})`);
  }
  const lora = o.lora && { ...o.lora, targets: poolTargets(config, o.lora) };
  const blockSize = o.kvCache.blockSize;
  const perToken = KvCache.bytesPerToken(config, placement);
  const cuda = placement.device === 'cuda';
  // Asked once: what memory_fraction is a share of, and on CUDA what is free after the weights.
  const mem = (memory ?? memoryOf(cuda))();
  if (o.kvCache.numBlocks !== undefined && o.kvCache.memoryFraction !== undefined) {
    throw new LimitsError('kv_cache: give num_blocks or memory_fraction, not both (num_blocks would win and the fraction mean nothing)');
  }
  const blockBytes = perToken * blockSize;
  const maxNumBatchedTokens = o.maxNumBatchedTokens ?? batchedTokensDefault(cuda, mem.total);
  const besides = memoryBesidesKv(config, { ...o, lora, maxNumBatchedTokens }, placement, cudaGraphsSetting(o.cudaGraphs), weights);
  // Every row at full length is whole blocks a row (rounding the total down left a full
  // batch short, and a short max_seq_len no block at all), within the caps.
  const fullBatch = o.maxBatchSize * Math.ceil(maxModelLen / blockSize);
  let numBlocks: number;
  if (o.kvCache.numBlocks !== undefined) numBlocks = o.kvCache.numBlocks;
  else if (o.kvCache.memoryFraction !== undefined) numBlocks = Math.floor(memoryShare(o.kvCache.memoryFraction, cuda, besides, mem) / blockBytes);
  else numBlocks = Math.min(fullBatch, Math.floor((cuda ? CUDA_MAX_KV_BYTES : Math.min(CPU_MAX_KV_BYTES, freemem() / 4)) / blockBytes));
  if (cuda) {
    // What the device has free (after the weights) must hold the cache and the rest: the
    // default shrinks to it (as the model's own length is cut below), an asked-for size is refused.
    const room = Math.floor((mem.free - totalBytes(besides)) / blockBytes);
    if (o.kvCache.numBlocks === undefined) numBlocks = Math.min(numBlocks, room);
    else if (numBlocks > room) {
      throw new LimitsError(`kv_cache.num_blocks ${numBlocks} (${gib(numBlocks * blockBytes)}) does not fit: the device has ` +
        `${gib(mem.free)} free after the weights, and ${besidesText(besides, cuda)}; at most ${Math.max(0, room)} blocks fit`);
    }
    // And the CUDA attention kernels address the cache's tokens in 32 bits (a small model's
    // cache sized by memory_fraction on a large GPU could pass that).
    const most = Math.floor(CUDA_MAX_KV_TOKENS / blockSize);
    if (o.kvCache.numBlocks === undefined) numBlocks = Math.min(numBlocks, most);
    else if (numBlocks > most) {
      throw new LimitsError(`kv_cache.num_blocks ${numBlocks} of ${blockSize} tokens is past the ${CUDA_MAX_KV_TOKENS} tokens ` +
        `the CUDA attention kernels address: at most ${most} blocks`);
    }
  }
  if (numBlocks < 1) {
    throw new LimitsError(`the KV cache has room for no block of ${blockSize} tokens` +
      (cuda ? ` (${gib(mem.free)} free on the device after the weights; ${besidesText(besides, cuda)})` : ''));
  }
  // A request must fit the whole cache. Asked-for lengths it cannot hold are an error at
  // start; the model's own (default) length is cut to what it holds, as vLLM does.
  const capacity = numBlocks * blockSize;
  if (o.maxModelLen !== undefined && o.maxModelLen > capacity) {
    throw new LimitsError(`max_seq_len ${o.maxModelLen} does not fit in the KV cache (${numBlocks} blocks of ${blockSize} = ${capacity} tokens): lower max_seq_len or give kv_cache more room`);
  }
  return {
    maxModelLen: Math.min(maxModelLen, capacity), blockSize, numBlocks,
    maxBatchSize: o.maxBatchSize, maxNumBatchedTokens, prefixCache: o.prefixCache,
    lora: lora && {
      slots: lora.slots, maxRank: lora.maxRank, hostCache: lora.hostCache, targets: lora.targets, sliceSteps: lora.sliceSteps,
      mergeAfterSteps: lora.mergeAfterSteps,
    },
    cudaGraphs: o.cudaGraphs,
    overlapSteps: o.overlapSteps,
  };
}
