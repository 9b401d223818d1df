// The engine's length limit follows what the KV cache can hold; memory_fraction sizes the
// cache from what the weights, the adapter pool and the activations leave.
import { describe, expect, it } from 'vitest';

import { memoryBesidesKv } from '../../lib/engine/memory.js';
import { batchedTokensDefault, engineLimits, type EngineOptions } from '../../lib/engine/options.js';
import { ALL_TARGETS } from '../../lib/lora/adapter.js';
import { MergedWeights } from '../../lib/lora/merged_weights.js';
import { SlotWeights } from '../../lib/lora/slot_weights.js';
import { CPU, cudaPlacement, KvCache, loadModel } from '../../lib/models/index.js';
import { Workspace, workspaceBytes } from '../../lib/models/workspace.js';
import { FIXTURES } from '../parity/fixture.js';
import { tinyModel } from './helpers.js';

const base: EngineOptions & { maxNumBatchedTokens: number } = {
  model: '', device: 'cpu', maxBatchSize: 4, maxNumBatchedTokens: 64, kvCache: { blockSize: 16, numBlocks: 8 }, prefixCache: true,
};

describe('engineLimits', () => {
  const config = tinyModel().config;  // max_position_embeddings 256

  it("cuts the model's own length to what the cache holds", () => {
    expect(engineLimits(config, base, CPU).maxModelLen).toBe(128);
    expect(engineLimits(config, { ...base, kvCache: { blockSize: 16, numBlocks: 64 } }, CPU).maxModelLen).toBe(256);
  });

  it('refuses an asked-for length the cache cannot hold, or the model cannot', () => {
    expect(() => engineLimits(config, { ...base, maxModelLen: 200 }, CPU)).toThrow(/max_seq_len 200 does not fit in the KV cache \(8 blocks of 16 = 128 tokens\)/);
    expect(() => engineLimits(config, { ...base, maxModelLen: 300 }, CPU)).toThrow(/above the model's max_position_embeddings \(256\)/);
  });
});

describe('the default KV cache', () => {
  const config = tinyModel().config;
  const sized = { ...base, kvCache: { blockSize: 16 } };

  it('holds every batch row at full length, in whole blocks a row', () => {
    expect(engineLimits(config, { ...sized, maxBatchSize: 64, maxModelLen: 100 }, CPU).numBlocks).toBe(64 * 7);
    // Lengths shorter than a block, or not a multiple of one, still get their block.
    expect(engineLimits(config, { ...sized, maxBatchSize: 1, maxModelLen: 8 }, CPU).numBlocks).toBe(1);
    expect(engineLimits(config, { ...sized, maxBatchSize: 1, maxModelLen: 24 }, CPU).numBlocks).toBe(2);
  });

  it('refuses num_blocks and memory_fraction together', () => {
    expect(() => engineLimits(config, { ...base, kvCache: { blockSize: 16, numBlocks: 8, memoryFraction: 0.5 } }, CPU))
      .toThrow(/kv_cache: give num_blocks or memory_fraction, not both/);
  });
});

describe('kv_cache.memory_fraction', () => {
  it('takes that share of free memory on the cpu', () => {
    const limits = engineLimits(tinyModel().config, { ...base, kvCache: { blockSize: 16, memoryFraction: 0.001 } }, CPU);
    expect(limits.numBlocks).toBeGreaterThan(0);
  });
});

describe('what memory_fraction leaves for the KV cache', () => {
  const config = tinyModel().config;
  const lora = { slots: 3, maxRank: 8, hostCache: 3, targets: [...ALL_TARGETS] };

  it('counts the adapter pool and the activations exactly as they are allocated', () => {
    const model = tinyModel();
    const pool = new SlotWeights(config, lora.slots + 1, lora.maxRank, new Set(lora.targets), model.weights, CPU);
    const plan = memoryBesidesKv(config, { ...base, lora: { ...lora } }, CPU, true);
    expect(plan.loraPool).toBe(pool.bytes);  // f32 weights: b beside W takes what b of its own would
    const ws = new Workspace(config, CPU, base.maxNumBatchedTokens, base.maxBatchSize, pool.widths);
    expect(plan.activations).toBe(ws.bytes);
    const plain = new Workspace(config, CPU, 7, 3);
    expect(workspaceBytes(config, CPU, 7, 3)).toBe(plain.bytes);  // without a pool: no LoRA buffer
    plain.dispose();
    expect(plan.scratch).toBe(0);  // and no graph workspace: graphs are CUDA's
    const merged = new MergedWeights(pool);  // merge_after_steps: a copy of each adapted W as loaded
    expect(memoryBesidesKv(config, { ...base, lora: { ...lora, mergeAfterSteps: 8 } }, CPU, true).loraPool).toBe(pool.bytes + merged.bytes);
    expect(merged.bytes).toBeGreaterThan(0);
    merged.dispose();
    ws.dispose();
    pool.dispose();
  });

  it("plans the pool in the loaded weights' dtypes, not the one config.json names", () => {
    // tiny-qwen3's config.json names no torch_dtype, so a plan without the weights takes bf16;
    // loaded as f32, its pool on CUDA (bf16 activations) holds b beside W and A beneath it in f32.
    const cuda = cudaPlacement('bf16');
    const f32 = loadModel(`${FIXTURES}/models/tiny-qwen3`, { dtype: 'f32' });
    const o = { ...base, lora: { ...lora, mergeAfterSteps: 8 } };
    const planned = memoryBesidesKv(config, o, cuda, true, f32.weights).loraPool;
    expect(planned).toBe(memoryBesidesKv(config, { ...o, dtype: 'f32' }, cuda, true).loraPool);
    expect(planned).toBeGreaterThan(memoryBesidesKv(config, o, cuda, true).loraPool);
    expect(memoryBesidesKv(config, o, cuda, true, tinyModel().weights).loraPool).toBe(memoryBesidesKv(config, o, cuda, true).loraPool);
    f32.weights.forEach((t) => t.dispose());
  });

  it('refuses a fraction that the adapter pool leaves no room in, naming what takes it', () => {
    const huge = { ...lora, slots: 2 ** 20, maxRank: 64 };
    expect(() => engineLimits(config, { ...base, kvCache: { blockSize: 16, memoryFraction: 0.01 }, lora: { ...huge, adapters: [] } }, CPU))
      .toThrow(/kv_cache.memory_fraction 0.01 .* leaves no room for the KV cache: the adapter pool takes [\d.]+ GiB, activations/);
  });
});

describe('the KV cache on CUDA, against the device memory (given, as after the weights)', () => {
  const config = tinyModel().config;
  const cuda = cudaPlacement('bf16');
  const GiB = 2 ** 30;
  const memory = (free: number, total = 16 * GiB) => () => ({ free, total });
  const blockBytes = KvCache.bytesPerToken(config, cuda) * 16;
  const besides = (o: typeof base) => {
    const p = memoryBesidesKv(config, { ...o, lora: undefined }, cuda, true);
    return p.loraPool + p.activations + p.scratch;
  };

  it('memory_fraction: that share of the whole device, less what is in use and what the engine adds', () => {
    const o = { ...base, kvCache: { blockSize: 16, memoryFraction: 0.5 } };
    const limits = engineLimits(config, o, cuda, { memory: memory(12 * GiB) });
    expect(limits.numBlocks).toBe(Math.floor((8 * GiB - 4 * GiB - besides(o)) / blockBytes));
  });

  it('an asked-for num_blocks that does not fit in what is free is refused, saying how many do', () => {
    const o = { ...base, kvCache: { blockSize: 16, numBlocks: 10_000_000 } };
    expect(() => engineLimits(config, o, cuda, { memory: memory(GiB) }))
      .toThrow(/^kv_cache.num_blocks 10000000 \([\d.]+ GiB\) does not fit: the device has 1.00 GiB free after the weights, and the adapter pool takes 0.00 GiB, activations [\d.]+ GiB, scratch 0.25 GiB; at most \d+ blocks fit$/);
    expect(engineLimits(config, { ...base, kvCache: { blockSize: 16, numBlocks: 100 } }, cuda, { memory: memory(GiB) }).numBlocks).toBe(100);
  });

  it('no cache past the 2^31 - 1 tokens the CUDA kernels address: memory_fraction stops there, num_blocks is refused', () => {
    const huge = memory(2 ** 52, 2 ** 52);  // a small model on a device of 4 PiB
    const most = Math.floor((2 ** 31 - 1) / 16);
    expect(engineLimits(config, { ...base, kvCache: { blockSize: 16, memoryFraction: 0.9 } }, cuda, { memory: huge }).numBlocks).toBe(most);
    expect(engineLimits(config, { ...base, kvCache: { blockSize: 16, numBlocks: most } }, cuda, { memory: huge }).numBlocks).toBe(most);
    expect(() => engineLimits(config, { ...base, kvCache: { blockSize: 16, numBlocks: most + 1 } }, cuda, { memory: huge }))
      .toThrow(`kv_cache.num_blocks ${most + 1} of 16 tokens is past the 2147483647 tokens the CUDA attention kernels address: at most ${most} blocks`);
  });

  it('max_num_batched_tokens when not given: 8192 on a device of 70 GiB or more, else 2048 (as vLLM)', () => {
    expect(batchedTokensDefault(true, 141 * GiB)).toBe(8192);
    expect(batchedTokensDefault(true, 40 * GiB)).toBe(2048);
    expect(batchedTokensDefault(false, 512 * GiB)).toBe(2048);
    const o: EngineOptions = { ...base, maxNumBatchedTokens: undefined };
    expect(engineLimits(config, o, cuda, { memory: memory(100 * GiB, 141 * GiB) }).maxNumBatchedTokens).toBe(8192);
    expect(engineLimits(config, o, cuda, { memory: memory(12 * GiB) }).maxNumBatchedTokens).toBe(2048);
    expect(engineLimits(config, o, CPU).maxNumBatchedTokens).toBe(2048);
    expect(engineLimits(config, { ...o, maxNumBatchedTokens: 300 }, cuda, { memory: memory(100 * GiB, 141 * GiB) }).maxNumBatchedTokens).toBe(300);
  });

  it('the default cache shrinks to what is free, and says so when not one block fits', () => {
    const o = { ...base, maxBatchSize: 64, kvCache: { blockSize: 16 } };
    const free = besides(o) + 10.5 * blockBytes;
    expect(engineLimits(config, o, cuda, { memory: memory(free) }).numBlocks).toBe(10);
    expect(() => engineLimits(config, o, cuda, { memory: memory(besides(o)) }))
      .toThrow(/the KV cache has room for no block of 16 tokens \([\d.]+ GiB free on the device after the weights; the adapter pool/);
  });
});
