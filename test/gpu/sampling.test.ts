// sample and logprobs on CUDA against the CPU backend: given the same logits the GPU
// picks the same token (greedy and seeded temperature / top-k / top-p draws), and
// reports the same log-probabilities and top tokens, ties broken by the lower index.
import { describe, expect, it } from 'vitest';

import type { Draw } from '../ops/reference.js';
import { ACTS, addon, describeGpu, expectClose, floats, i32, i64, ints, onCpu, onCuda, Rng, rounded, type Act } from './helpers.js';

const PARAMS: Omit<Draw, 'seed' | 'step'>[] = [
  { temperature: 0, topK: 0, topP: 1 },
  { temperature: 1, topK: 1, topP: 1 },
  { temperature: 1, topK: 0, topP: 1 },
  { temperature: 0.7, topK: 0, topP: 1 },
  { temperature: 1.5, topK: 0, topP: 1 },
  { temperature: 1, topK: 20, topP: 1 },
  { temperature: 0.8, topK: 50, topP: 0.8 },
  { temperature: 1, topK: 0, topP: 0.9 },
  { temperature: 1.2, topK: 0, topP: 0.5 },
  { temperature: 1, topK: 3, topP: 0.99 },
  { temperature: 2, topK: 100000000, topP: 1 },
  { temperature: 1, topK: -1, topP: 1 },
];

/** n rows of logits: smooth random ones, and (every third row) values from a small set, full of ties. */
function logitRows(rng: Rng, n: number, vocab: number): Float32Array {
  const out = new Float32Array(n * vocab);
  for (let r = 0; r < n; ++r) {
    const tied = r % 3 === 2;
    for (let i = 0; i < vocab; ++i) out[r * vocab + i] = tied ? rng.int(0, 6) * 0.75 : rng.uniform(-8, 8);
  }
  return out;
}

function draws(rng: Rng, n: number): Draw[] {
  return Array.from({ length: n }, (_, r) => ({
    ...PARAMS[r % PARAMS.length],
    seed: r % 5 === 4 ? -rng.int(1, 1e9) : r % 5 === 3 ? 2 ** 40 + r : rng.int(0, 1e9),
    step: rng.int(0, 5000),
  }));
}

function sampleOn(dev: 'cpu' | 'cuda', act: Act, logits: Float32Array, d: Draw[], vocab: number): number[] {
  const n = d.length;
  const col = (k: keyof Draw) => d.map((x) => x[k]);
  if (dev === 'cpu') {
    const out = addon.empty('i32', [n]);
    addon.sample(out, onCpu([n, vocab], logits), onCpu([n], col('temperature')), i32([n], col('topK')),
      onCpu([n], col('topP')), i64([n], col('seed')), i32([n], col('step')));
    return Array.from(ints(out));
  }
  const out = addon.empty('i32', [n], 'cuda');
  addon.sample(out, onCuda(act, [n, vocab], logits), onCuda('f32', [n], col('temperature')), onCuda('i32', [n], col('topK')),
    onCuda('f32', [n], col('topP')), onCuda('i64', [n], col('seed')), onCuda('i32', [n], col('step')));
  return Array.from(ints(out));
}

describeGpu('cuda sampling', () => {
  describe.each(ACTS)('%s logits', (act) => {
    it.each([1, 7, 33, 130, 1000, 32000, 151936])('vocab %i: the same tokens as the CPU', (vocab) => {
      const rng = new Rng(vocab + act.length);
      const n = vocab > 10000 ? 48 : 96;
      const logits = rounded(act, logitRows(rng, n, vocab));
      for (let rep = 0; rep < (vocab > 10000 ? 1 : 3); ++rep) {
        const d = draws(rng, n);
        expect(sampleOn('cuda', act, logits, d, vocab)).toEqual(sampleOn('cpu', act, logits, d, vocab));
      }
    });

    // A language model's logits are peaked: the nucleus is a few dozen tokens, found among the
    // vocabulary slices' candidates; at top-p 0.99 it reaches past them and the search falls
    // back to the whole vocabulary. Either way the GPU picks the CPU's token.
    it.each([32000, 151936])('vocab %i, peaked logits, top-p alone: the same tokens as the CPU', (vocab) => {
      const rng = new Rng(vocab + 7 + act.length);
      const n = 40;
      const logits = new Float32Array(n * vocab);
      for (let r = 0; r < n; ++r) {
        const rank = rng.shuffle(Array.from({ length: vocab }, (_, i) => i + 1));
        for (let i = 0; i < vocab; ++i) logits[r * vocab + i] = 12 - 1.5 * Math.log(rank[i]);  // Zipf-like weights
      }
      const peaked = rounded(act, logits);
      const d = Array.from({ length: n }, (_, r): Draw => ({
        temperature: [0.7, 1, 1.3][r % 3], topK: r % 4 === 3 ? vocab : 0, topP: [0.5, 0.9, 0.95, 0.99][r % 4],
        seed: rng.int(0, 1e9), step: rng.int(0, 5000),
      }));
      expect(sampleOn('cuda', act, peaked, d, vocab)).toEqual(sampleOn('cpu', act, peaked, d, vocab));
    });

    it.each([[1, 0], [7, 1], [130, 5], [1000, 20], [151936, 20]])('logprobs, vocab %i, top %i', (vocab, k) => {
      const rng = new Rng(vocab * 3 + k);
      const n = 12;
      const logits = rounded(act, logitRows(rng, n, vocab));
      const chosen = rng.ints(n, 0, vocab);
      const run = (dev: 'cpu' | 'cuda') => {
        const lp = addon.empty('f32', [n], dev);
        const ids = addon.empty('i32', [n, k], dev);
        const top = addon.empty('f32', [n, k], dev);
        if (dev === 'cpu') addon.logprobs(lp, ids, top, onCpu([n, vocab], logits), i32([n], chosen));
        else addon.logprobs(lp, ids, top, onCuda(act, [n, vocab], logits), onCuda('i32', [n], chosen));
        return { lp: floats(lp), ids: Array.from(ints(ids)), top: floats(top) };
      };
      const want = run('cpu');
      const got = run('cuda');
      expect(got.ids).toEqual(want.ids);
      expectClose(got.lp, want.lp, 1e-5);
      expectClose(got.top, want.top, 1e-5);
    });
  });
});
