// The engine's length limit follows what the KV cache can hold.
import { describe, expect, it } from 'vitest';

import { engineLimits, type EngineOptions } from '../../lib/engine/options.js';
import { CPU } from '../../lib/models/index.js';
import { tinyModel } from './helpers.js';

const base: EngineOptions = {
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
