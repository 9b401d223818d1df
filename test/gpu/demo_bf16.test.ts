// bf16 on CUDA against the exact reference on a trained model (the shipped demo model and
// its adapters, whose logits have realistic margins). The reference is the CPU engine in f32,
// which reproduces HF transformers + PEFT exactly (test/parity, test/lora, test/e2e/demo.test.ts).
//  - Generating freely: no failure under vLLM's rule (our token differs only where it is in
//    the reference's top-5).
//  - Scoring the reference's own sequences (each position judged on the same prefix): ≥ 95%
//    of positions give the reference's greedy token. Counting the tokens identical before the
//    first divergence of free generation instead is chaotic at this model's near-ties (its
//    top-2 logprobs often within 0.02): one flip at a sequence's second token costs 4% of 24
//    sequences, and the rate moved 96.4% -> 87.5% on a change that brought the logits closer
//    to f32 (mean relative error 6.7e-3 -> 6.1e-3 on adapter rows); it is logged.
import { expect, it } from 'vitest';

import { demoModel } from '../../lib/config/demo.js';
import { Engine } from '../../lib/engine/engine.js';
import { ALL_TARGETS } from '../../lib/lora/adapter.js';
import { CPU, cudaPlacement, KvCache, loadModel, stepTensors, type Model, type Placement } from '../../lib/models/index.js';
import { Tokenizer } from '../../lib/tokenizer/tokenizer.js';
import { greedy, greedyRuns } from '../engine/helpers.js';
import { compareGreedy } from '../parity/greedy_rule.js';
import { describeGpu } from './helpers.js';

const PROMPTS = [
  'Permission is hereby granted', 'The licensor', 'THIS SOFTWARE IS PROVIDED', 'Redistribution and use in source',
  'You may not', 'GNU GENERAL PUBLIC LICENSE', 'Licensed under the Apache License', 'In no event shall',
  'Copyright (c)', 'This program is free software', 'Unless required by applicable law', 'WITHOUT WARRANTIES OR CONDITIONS',
  'The above copyright notice', 'Neither the name of the', 'IN NO EVENT SHALL THE AUTHORS', 'you may not use this file',
];
const MODELS = [undefined, 'shout', 'gpl'];
const BS = 16;

type Runs = Map<string, { ids: number[]; top: [number, number][][] }>;

/** Greedy argmax at every position of tokens (one step), the row running `slot`. */
function argmaxes(model: Model, tokens: number[], slot: number): number[] {
  const vocab = model.config.vocabSize, n = tokens.length, blocks = Math.ceil(n / BS);
  const kv = new KvCache(model.config, blocks, BS, model.placement);
  const t = stepTensors({
    tokens: Int32Array.from(tokens), positions: Int32Array.from(tokens, (_, j) => j), slots: Int32Array.from(tokens, (_, j) => j),
    queryStarts: Int32Array.from([0, n]), contextLens: Int32Array.from([n]),
    blockTables: Int32Array.from({ length: blocks }, (_, b) => b), maxBlocks: blocks,
    logitRows: Int32Array.from(tokens, (_, j) => j),
    lora: { rowSlots: new Int32Array(n).fill(slot), logitSlots: new Int32Array(n).fill(slot), embedRows: Int32Array.from(tokens, (tok) => slot * vocab + tok) },
  }, model.placement.device);
  const out = model.forward(t, kv), all = out.to('cpu'), v = all.toArray() as Float32Array;
  [t, out, all, kv].forEach((x) => x.dispose());
  return Array.from({ length: n }, (_, r) => {
    let best = 0;
    for (let j = 1; j < vocab; j++) if (v[r * vocab + j] > v[r * vocab + best]) best = j;
    return best;
  });
}

/** Free greedy runs of every prompt on the base model and each adapter; with `score`, also scores `score`'s sequences. */
async function run(placement: Placement, score?: Runs): Promise<{ runs: Runs; agree: number; positions: number }> {
  const demo = demoModel();
  const tok = Tokenizer.load(demo.model);
  const model = loadModel(demo.model, { placement });
  const e = new Engine(model, {
    maxModelLen: 1024, maxBatchSize: 64, maxNumBatchedTokens: 2048, blockSize: BS, numBlocks: 512, prefixCache: true,
    lora: { slots: 2, maxRank: 16, hostCache: 2, targets: ALL_TARGETS },
  });
  for (const a of demo.adapters) await e.loadAdapter(a.name, a.path);
  const prompt = (i: number) => tok.encode(PROMPTS[i], { addSpecialTokens: false });
  PROMPTS.forEach((_, i) => MODELS.forEach((adapter) => e.add({
    id: `${adapter ?? 'base'}/${i}`, promptIds: prompt(i), params: greedy(32, { logprobs: 5 }), adapter,
  })));
  const runs = greedyRuns(e);
  let agree = 0, positions = 0;
  if (score) {
    for (const adapter of MODELS) {
      const slot = adapter ? e.lora!.acquire(e.lora!.keyOf(adapter)!) as number : 0;
      PROMPTS.forEach((_, i) => {
        const p = prompt(i), want = score.get(`${adapter ?? 'base'}/${i}`)!.ids;
        const got = argmaxes(model, [...p, ...want.slice(0, -1)], slot).slice(p.length - 1);
        agree += got.filter((id, k) => id === want[k]).length;
        positions += want.length;
      });
      if (adapter) e.lora!.release(slot);
    }
  }
  e.close();
  model.dispose();
  return { runs, agree, positions };
}

describeGpu('bf16 on a trained model', () => {
  it('the demo model and its adapters: 0 failures under vLLM\'s rule, ≥ 95% of the reference\'s tokens scored as greedy', async () => {
    const ref = (await run(CPU)).runs;
    const ours = await run(cudaPlacement('bf16'), ref);
    let identical = 0, total = 0, failures = 0;
    for (const [id, want] of ref) {
      const cmp = compareGreedy(ours.runs.get(id)!, want);
      identical += cmp.identical;
      total += want.ids.length;
      if (cmp.failed) failures++;
    }
    console.log(`demo model cuda bf16 vs exact f32: ${ours.agree}/${ours.positions} positions give the reference's token on its prefix; ` +
      `free generation: ${identical}/${total} tokens identical before any divergence, ${failures} failures`);
    expect(failures).toBe(0);
    expect(ours.agree / ours.positions).toBeGreaterThanOrEqual(0.95);
  });
});
