import { describe, expect, it } from 'vitest';

import { addon } from '../../lib/addon/index.js';
import { warmUpSizes, warmUpStep } from '../../lib/engine/eager_warmup.js';
import { ModelRunner } from '../../lib/engine/runner.js';
import { ALL_TARGETS } from '../../lib/lora/adapter.js';
import { LoraManager } from '../../lib/lora/manager.js';
import { KvCache, loadModel } from '../../lib/models/index.js';
import { FIXTURES } from '../parity/fixture.js';
import { engine } from './helpers.js';

describe('warm-up sizes and steps (the eager steps\' GEMM shapes, met before serving)', () => {
  it('takes every row count up to 64 and the row buckets above, up to max_num_batched_tokens', () => {
    expect(warmUpSizes(8192, [80, 96, 8192])).toEqual([...Array.from({ length: 64 }, (_, i) => i + 1), 80, 96, 8192]);
    expect(warmUpSizes(90, [80, 96])).toEqual([...Array.from({ length: 64 }, (_, i) => i + 1), 80]);
    expect(warmUpSizes(3, [80])).toEqual([1, 2, 3]);
  });

  it('the native row buckets: a quarter of each power of two above 64, the last one serving max', () => {
    expect(addon.gemmTunedRows).toBe(64);  // every count up to it its own plan: the sizes above
    const b = addon.gemmRowBuckets(1000);
    expect(b.slice(0, 6)).toEqual([80, 96, 112, 128, 160, 192]);
    expect(b[b.length - 1]).toBe(1024);
    expect(b.every((n, i) => i === 0 || n > b[i - 1])).toBe(true);
    expect(addon.gemmRowBuckets(64)).toEqual([]);
    expect(() => (addon.gemmRowBuckets as (v: unknown) => number[])('8')).toThrow(/one number/);
  });

  it('a step of n padding rows: no KV slot, block 0 only, a sequence a row up to 64, chunks above', () => {
    for (const [n, seqs] of [[1, 1], [37, 37], [64, 64], [80, 1], [300, 3], [8192, 64]] as const) {
      const s = warmUpStep(n, 256, 16, false);
      expect(s.tokens.length).toBe(n);
      expect(s.queryStarts.length).toBe(seqs + 1);
      expect(s.queryStarts[seqs]).toBe(n);
      expect([...s.slots].every((x) => x === -1)).toBe(true);
      expect([...s.blockTables].every((x) => x === 0)).toBe(true);
      expect(s.blockTables.length).toBe(seqs * s.maxBlocks);
      for (let q = 0; q < seqs; q++) {
        const len = s.queryStarts[q + 1] - s.queryStarts[q];
        expect(s.contextLens[q]).toBe(len);
        expect(s.positions[s.queryStarts[q] + len - 1]).toBe(len - 1);
        expect(s.logitRows[q]).toBe(s.queryStarts[q + 1] - 1);
        expect(len).toBeLessThanOrEqual(s.maxBlocks * 16);
      }
      expect(s.lora).toBeUndefined();
    }
    // Fewer sequences than rows allow: longer ones.
    expect(warmUpStep(64, 4, 16, false).queryStarts).toEqual(Int32Array.from([0, 16, 32, 48, 64]));
    const planned = warmUpStep(100, 256, 16, true);
    expect([...planned.lora!.rowSlots].every((x) => x === 0)).toBe(true);
    expect(planned.lora!.rowSlots.length).toBe(100);
    expect(planned.lora!.logitSlots.length).toBe(1);
  });
});

describe('ModelRunner.warmUpEager', () => {
  it('runs each size without and with a LoRA plan, and leaves the KV cache as it was', async () => {
    const model = loadModel(`${FIXTURES}/models/tiny-qwen3`);
    const lora = new LoraManager(model, { slots: 1, maxRank: 8, hostCache: 1, targets: ALL_TARGETS });
    model.lora = lora.weights;  // as the engine gives a model its pool
    const kv = new KvCache(model.config, 8, 16, model.placement);
    const runner = new ModelRunner(model, kv, { cudaGraphs: false, maxBatchSize: 8, maxNumBatchedTokens: 300, maxModelLen: 128, blockSize: 16 });
    try {
      const before = [...kv.k, ...kv.v].map((t) => Float32Array.from(t.toArray() as Float32Array));
      // 400 is past max_num_batched_tokens: skipped.
      expect(runner.warmUpEager([1, 5, 64, 80, 300, 400])).toBe(10);
      [...kv.k, ...kv.v].forEach((t, i) => expect(Float32Array.from(t.toArray() as Float32Array)).toEqual(before[i]));
    } finally {
      runner.close();
      kv.dispose();
      lora.dispose();
    }
  });

  it('is a no-op for the engine on the cpu (no cuBLASLt plans to make)', () => {
    expect(engine().warmUpEagerSteps()).toBe(0);
  });
});
