// The engine on CUDA against HF transformers + PEFT (the fixtures of test/parity): the base
// model and every adapter, all in one mixed batch, greedy. f32 activations must give HF's
// tokens; bf16 (the fast path) must break vLLM's rule nowhere. (These random tiny models have
// top-2 logit margins of 0.005-0.02, below bf16 rounding, so their identical-token rate is
// only logged; demo_bf16.test.ts checks the ≥ 95% rate on a trained model.) Merged: each
// adapter's requests run alone, merged into the weights from their first step (merge_after_steps
// 1), against the same unmerged HF + PEFT reference.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';

import { Engine } from '../../lib/engine/engine.js';
import { ALL_TARGETS } from '../../lib/lora/adapter.js';
import { cudaPlacement, loadModel } from '../../lib/models/index.js';
import { greedy, greedyRuns } from '../engine/helpers.js';
import { FIXTURES, readParityFixture } from '../parity/fixture.js';
import { compareGreedy } from '../parity/greedy_rule.js';
import { describeGpu } from './helpers.js';

interface Case { prompt_ids: number[]; output_ids: number[]; top_logprobs: [number, number][][] }
interface LoraFixture { adapters: Record<string, { path: string; cases: Case[] }> }

async function runAll(modelName: string, act: 'f32' | 'bf16', merged = false) {
  const base = readParityFixture(modelName);
  const lora = JSON.parse(readFileSync(join(FIXTURES, 'parity', `lora-${modelName}.json`), 'utf8')) as LoraFixture;
  const names = Object.keys(lora.adapters);
  const model = loadModel(base.modelDir, { placement: cudaPlacement(act) });
  const e = new Engine(model, {
    maxModelLen: 256, maxBatchSize: 64, maxNumBatchedTokens: 1024, blockSize: 16, numBlocks: 128, prefixCache: true,
    lora: { slots: names.length, maxRank: 16, hostCache: names.length, targets: ALL_TARGETS, ...(merged ? { mergeAfterSteps: 1 } : {}) },
  });
  for (const n of names) await e.loadAdapter(n, join(FIXTURES, lora.adapters[n].path));
  const want = new Map<string, Case>();
  base.cases.forEach((c, i) => want.set(`base/${i}`, { prompt_ids: c.promptIds, output_ids: c.outputIds, top_logprobs: c.topLogprobs }));
  for (const n of names) lora.adapters[n].cases.forEach((c, i) => want.set(`${n}/${i}`, c));
  const adapterOf = (id: string) => (id.startsWith('base/') ? undefined : id.split('/')[0]);
  const got = new Map<string, { ids: number[]; top: [number, number][][] }>();
  // One mixed batch; merged, one adapter's requests at a time.
  for (const group of merged ? [undefined, ...names] : [null]) {
    for (const [id, c] of want) {
      const adapter = adapterOf(id);
      if (group === null || adapter === group) e.add({ id, promptIds: c.prompt_ids, params: greedy(c.output_ids.length, { logprobs: 5 }), adapter });
    }
    for (const [id, r] of greedyRuns(e)) got.set(id, r);
  }
  let failures = 0, identical = 0, total = 0, fullyIdentical = 0;
  for (const [id, c] of want) {
    const cmp = compareGreedy(got.get(id)!, { ids: c.output_ids, top: c.top_logprobs });
    if (cmp.failed) failures++;
    identical += cmp.identical;
    total += c.output_ids.length;
    if (cmp.divergedAt < 0) fullyIdentical++;
  }
  const merges = e.stats().lora!.merges;
  console.log(`${modelName} cuda ${act}${merged ? `, merged (${merges} merges)` : ''}: ${want.size} sequences (base + ${names.length} adapters), ` +
    `${fullyIdentical} identical, ${identical}/${total} tokens identical before any divergence, ${failures} failures under vLLM's rule`);
  model.dispose();
  return { failures, identical, total, merges };
}

describeGpu('the CUDA engine matches HF + PEFT', () => {
  for (const m of ['tiny-llama', 'tiny-qwen3']) {
    it(`${m}, f32 activations: HF's tokens`, async () => {
      const r = await runAll(m, 'f32');
      expect(r.failures).toBe(0);
      expect(r.identical).toBe(r.total);
    });
    it(`${m}, bf16 activations: 0 failures under vLLM's rule`, async () => {
      expect((await runAll(m, 'bf16')).failures).toBe(0);
    });
    it(`${m}, each adapter merged into the weights: HF's tokens in f32, 0 failures under vLLM's rule in bf16`, async () => {
      const f32 = await runAll(m, 'f32', true);
      expect(f32.merges).toBeGreaterThan(0);
      expect(f32.failures).toBe(0);
      expect(f32.identical).toBe(f32.total);
      const bf16 = await runAll(m, 'bf16', true);
      expect(bf16.merges).toBe(f32.merges);
      expect(bf16.failures).toBe(0);
    });
  }
});
