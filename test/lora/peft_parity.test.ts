// Every PEFT adapter fixture, all served together in one engine (mixed batches), against
// HF transformers + PEFT: greedy tokens under vLLM's rule with 0 failures (fp32 on both
// sides: identical) and top-5 logprobs within 1e-4.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ALL_TARGETS } from '../../lib/lora/adapter.js';
import { describe, expect, it } from 'vitest';

import { FIXTURES } from '../parity/fixture.js';
import { compareGreedy } from '../parity/greedy_rule.js';
import { engine, greedy, greedyRuns } from '../engine/helpers.js';

interface LoraFixture {
  adapters: Record<string, { path: string; cases: { prompt_ids: number[]; output_ids: number[]; top_logprobs: [number, number][][] }[] }>;
}

const TARGETS = ALL_TARGETS;

for (const model of ['tiny-llama', 'tiny-qwen3']) {
  describe(`${model} + PEFT adapters match HF`, () => {
    const fx = JSON.parse(readFileSync(join(FIXTURES, 'parity', `lora-${model}.json`), 'utf8')) as LoraFixture;
    const names = Object.keys(fx.adapters);

    it(`${names.length} adapters, every prompt, in one mixed batch`, async () => {
      const e = engine({ lora: { slots: names.length, maxRank: 16, hostCache: names.length, targets: TARGETS } }, model);
      for (const name of names) await e.loadAdapter(name, join(FIXTURES, fx.adapters[name].path));
      for (const name of names) {
        fx.adapters[name].cases.forEach((c, i) =>
          e.add({ id: `${name}/${i}`, promptIds: c.prompt_ids, params: greedy(c.output_ids.length, { logprobs: 5 }), adapter: name }));
      }
      const got = greedyRuns(e);
      for (const name of names) {
        fx.adapters[name].cases.forEach((c, i) => {
          const ours = got.get(`${name}/${i}`)!;
          const cmp = compareGreedy(ours, { ids: c.output_ids, top: c.top_logprobs });
          expect(cmp.failed, `${name} case ${i} diverged at ${cmp.divergedAt}`).toBe(false);
          expect(ours.ids, `${name} case ${i}`).toEqual(c.output_ids);
          c.top_logprobs.forEach((ref, step) => ref.forEach(([id, lp], k) => {
            expect(ours.top[step][k][0]).toBe(id);
            expect(Math.abs(ours.top[step][k][1] - lp), `${name} case ${i} step ${step}`).toBeLessThan(1e-4);
          }));
        });
      }
    });
  });
}

describe('the bad adapter fixtures are refused', () => {
  const bad: [string, RegExp][] = [
    ['dora', /DoRA/], ['bias', /bias/], ['lora-bias', /bias/], ['pickled', /pickled/], ['prompt-tuning', /PROMPT_TUNING/],
    ['unknown-target', /"foo_proj" is not a module/], ['wrong-shape', /does not fit/], ['modified-embed-copy', /differs from the base model/],
  ];
  for (const [name, message] of bad) {
    it(name, async () => {
      const e = engine({ lora: { slots: 1, maxRank: 16, hostCache: 1, targets: TARGETS } }, 'tiny-llama');
      await expect(e.loadAdapter(name, join(FIXTURES, 'adapters', 'bad', name))).rejects.toThrow(message);
      expect(e.stats().lora!.registered).toBe(0);
    });
  }
});
