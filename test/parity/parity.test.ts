// The CPU engine against Hugging Face transformers (fp32 on CPU, from bf16 weights):
// greedy tokens under vLLM's rule with no failures, and logits within 1e-4 relative error.
import { describe, expect, it } from 'vitest';

import { loadModel } from '../../lib/models/index.js';
import { readParityFixture } from './fixture.js';
import { generateGreedy, type GenerateOptions } from './generate.js';
import { compareGreedy, relativeError } from './greedy_rule.js';

const layouts: [string, Omit<GenerateOptions, 'newTokens' | 'topK'>][] = [
  ['whole prompts in one step, block size 16', { blockSize: 16, chunk: 1 << 20 }],
  ['prompts in chunks of 7 over blocks of 4', { blockSize: 4, chunk: 7 }],
];

for (const name of ['tiny-llama', 'tiny-qwen3']) {
  describe(`${name} matches HF transformers`, () => {
    const fx = readParityFixture(name);
    const model = loadModel(fx.modelDir);
    const newTokens = fx.cases[0].outputIds.length;

    for (const [label, layout] of layouts) {
      it(`all prompts batched together: ${label}`, () => {
        const runs = generateGreedy(model, fx.cases.map((c) => c.promptIds), { ...layout, newTokens, topK: fx.topK });
        fx.cases.forEach((c, i) => {
          const cmp = compareGreedy(runs[i], { ids: c.outputIds, top: c.topLogprobs });
          expect(cmp.failed, `case ${i} diverged at ${cmp.divergedAt}`).toBe(false);
          expect(runs[i].ids).toEqual(c.outputIds);  // fp32 vs fp32: identical, not merely close
          c.logits.forEach((ref, step) => {
            expect(relativeError(runs[i].logits[step], ref), `case ${i} step ${step}`).toBeLessThan(1e-4);
          });
          c.topLogprobs.forEach((ref, step) => {
            ref.forEach(([id, lp], k) => {
              expect(runs[i].top[step][k][0]).toBe(id);
              expect(Math.abs(runs[i].top[step][k][1] - lp)).toBeLessThan(1e-4);
            });
          });
        });
      });
    }
  });
}
