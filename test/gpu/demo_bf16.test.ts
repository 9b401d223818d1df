// bf16 on CUDA against the exact reference on a trained model (the shipped demo model and
// its adapters, whose logits have realistic margins): greedy tokens ≥ 95% identical and no
// failure under vLLM's rule. The reference is the CPU engine in f32, which reproduces HF
// transformers + PEFT exactly (test/parity, test/lora, test/e2e/demo.test.ts).
import { expect, it } from 'vitest';

import { demoModel } from '../../lib/config/demo.js';
import { Engine } from '../../lib/engine/engine.js';
import { ALL_TARGETS } from '../../lib/lora/adapter.js';
import { CPU, cudaPlacement, loadModel, type Placement } from '../../lib/models/index.js';
import { Tokenizer } from '../../lib/tokenizer/tokenizer.js';
import { greedy, greedyRuns } from '../engine/helpers.js';
import { compareGreedy } from '../parity/greedy_rule.js';
import { describeGpu } from './helpers.js';

const PROMPTS = [
  'Permission is hereby granted', 'The licensor', 'THIS SOFTWARE IS PROVIDED', 'Redistribution and use in source',
  'You may not', 'GNU GENERAL PUBLIC LICENSE', 'Licensed under the Apache License', 'In no event shall',
];
const MODELS = [undefined, 'shout', 'gpl'];

async function run(placement: Placement): Promise<Map<string, { ids: number[]; top: [number, number][][] }>> {
  const demo = demoModel();
  const tok = Tokenizer.load(demo.model);
  const model = loadModel(demo.model, { placement });
  const e = new Engine(model, {
    maxModelLen: 1024, maxBatchSize: 64, maxNumBatchedTokens: 2048, blockSize: 16, numBlocks: 256, prefixCache: true,
    lora: { slots: 2, maxRank: 16, hostCache: 2, targets: ALL_TARGETS },
  });
  for (const a of demo.adapters) await e.loadAdapter(a.name, a.path);
  PROMPTS.forEach((p, i) => MODELS.forEach((adapter) => e.add({
    id: `${adapter ?? 'base'}/${i}`, promptIds: tok.encode(p, { addSpecialTokens: false }), params: greedy(32, { logprobs: 5 }), adapter,
  })));
  const got = greedyRuns(e);
  model.dispose();
  return got;
}

describeGpu('bf16 on a trained model', () => {
  it('the demo model and its adapters: ≥ 95% identical greedy tokens, 0 failures', async () => {
    const ref = await run(CPU);
    const ours = await run(cudaPlacement('bf16'));
    let identical = 0, total = 0, failures = 0;
    for (const [id, want] of ref) {
      const cmp = compareGreedy(ours.get(id)!, want);
      identical += cmp.identical;
      total += want.ids.length;
      if (cmp.failed) failures++;
    }
    console.log(`demo model cuda bf16 vs exact f32: ${identical}/${total} tokens identical before any divergence, ${failures} failures`);
    expect(failures).toBe(0);
    expect(identical / total).toBeGreaterThanOrEqual(0.95);
  });
});
