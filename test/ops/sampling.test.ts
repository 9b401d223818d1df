// Token choice (sample) and log-probabilities (logprobs).
import { describe, expect, it } from 'vitest';

import { addon, expectClose, expectOpError, expectSame, f32, floats, i32, i64, ints, ODD_SIZES } from './helpers.js';
import { Rng } from './random.js';
import * as ref from './reference.js';
import type { Draw } from './reference.js';

const FREE: Omit<Draw, 'seed' | 'step'> = { temperature: 1, topK: 0, topP: 1 };

/** One sample() call: row r of `logits` is drawn with draws[r]. */
function sample(logits: Float32Array[], draws: Draw[]): number[] {
  const n = logits.length;
  const vocab = logits[0].length;
  const flat = new Float32Array(n * vocab);
  logits.forEach((row, r) => flat.set(row, r * vocab));
  const out = addon.empty('i32', [n]);
  const col = (key: keyof Draw) => draws.map((d) => d[key]);
  addon.sample(
    out, f32([n, vocab], flat), f32([n], col('temperature')), i32([n], col('topK')), f32([n], col('topP')),
    i64([n], col('seed')), i32([n], col('step')),
  );
  return Array.from(ints(out));
}

describe('sample', () => {
  it.each(ODD_SIZES)('vocab %i: temperature <= 0 or topK 1 picks the argmax', (vocab) => {
    const rng = new Rng(vocab);
    const draws: Draw[] = [
      { temperature: 0, topK: 0, topP: 1, seed: 1, step: 0 },
      { temperature: -1, topK: 0, topP: 1, seed: 2, step: 5 },
      { temperature: 0, topK: 5, topP: 0.5, seed: 3, step: 1 },
      { temperature: 1, topK: 1, topP: 1, seed: 4, step: 2 },
      { temperature: 5, topK: 1, topP: 0.9, seed: 5, step: 3 },
    ];
    const logits = draws.map(() => rng.floats(vocab, -3, 3));
    expect(sample(logits, draws)).toEqual(logits.map(ref.argmax));
  });

  it('greedy takes the first of tied maxima', () => {
    const greedy = { temperature: 0, topK: 0, topP: 1, seed: 0, step: 0 };
    expect(sample([Float32Array.of(1, 3, 3, 0)], [greedy])).toEqual([1]);
  });

  describe('is a function of (logits, parameters, seed, step)', () => {
    const rng = new Rng(99);
    const vocab = 33;
    const draws: Draw[] = [
      { temperature: 1, topK: 0, topP: 1, seed: 7, step: 0 },
      { temperature: 0.8, topK: 20, topP: 1, seed: 7, step: 1 },
      { temperature: 1.3, topK: 0, topP: 0.9, seed: -12345, step: 2 },
      { temperature: 2, topK: 10, topP: 0.95, seed: 2 ** 40, step: 77 },
      { temperature: 1, topK: 0, topP: 1, seed: 8, step: 0 },
    ];
    const logits = draws.map(() => rng.floats(vocab, -1, 1));
    const first = sample(logits, draws);

    it('across calls', () => {
      expect(sample(logits, draws)).toEqual(first);
    });

    it('wherever the row sits in the batch', () => {
      const others = draws.map(() => rng.floats(vocab, -1, 1));
      const order = rng.shuffle(draws.map((_, i) => i));
      // Interleave distractor rows (other logits, seeds and steps) with the shuffled rows.
      const batchLogits = order.flatMap((i, j) => [others[j], logits[i]]);
      const batchDraws = order.flatMap((i, j) => [{ ...FREE, seed: 1000 + j, step: j }, draws[i]]);
      const got = sample(batchLogits, batchDraws);
      expect(order.map((_, j) => got[2 * j + 1])).toEqual(order.map((i) => first[i]));
    });

    it('and different steps or seeds draw different tokens', () => {
      const flat = new Float32Array(vocab);
      const bySteps = sample(Array.from({ length: 64 }, () => flat), Array.from({ length: 64 }, (_, s) => ({ ...FREE, seed: 5, step: s })));
      const bySeeds = sample(Array.from({ length: 64 }, () => flat), Array.from({ length: 64 }, (_, s) => ({ ...FREE, seed: s, step: 5 })));
      expect(new Set(bySteps).size).toBeGreaterThan(20);
      expect(new Set(bySeeds).size).toBeGreaterThan(20);
    });
  });

  it('always returns a token of the top-k set and the top-p nucleus', () => {
    const rng = new Rng(2024);
    const vocab = 130;
    const rows = 600;
    const logits = Array.from({ length: rows }, () => rng.floats(vocab, -4, 4));
    const draws = logits.map((_, r): Draw => ({
      temperature: rng.uniform(0.2, 2),
      topK: [0, 2, 7, 40, 200][r % 5],
      topP: [1, 0.05, 0.5, 0.9][Math.floor(r / 5) % 4],
      seed: r * 7919,
      step: r,
    }));
    const got = sample(logits, draws);
    got.forEach((id, r) => {
      const d = draws[r];
      const allowed = ref.samplingDistribution(logits[r], d.temperature, d.topK, d.topP).ids;
      expect(allowed, `row ${r} drew ${id}`).toContain(id);
    });
  });

  it('never draws a token whose logit is -Infinity', () => {
    const logits = Float32Array.from({ length: 33 }, (_, i) => (i % 3 === 0 ? 0.1 * i : -Infinity));
    const draws = Array.from({ length: 2000 }, (_, s): Draw => ({ ...FREE, temperature: 3, seed: 11, step: s }));
    const got = sample(draws.map(() => logits), draws);
    expect(got.every((id) => id % 3 === 0)).toBe(true);
  });

  // Many steps of one seed must draw tokens with the probabilities the parameters ask for.
  // Fixed seeds make this deterministic; the bound is ~5 standard deviations anyway.
  it.each([
    { name: 'temperature 1', temperature: 1, topK: 0, topP: 1 },
    { name: 'temperature 0.7, top-k 4, top-p 0.9', temperature: 0.7, topK: 4, topP: 0.9 },
  ])('$name: frequencies over many steps approach the softmax', (params) => {
    const logits = Float32Array.of(2, 1, 0.5, 0, -1, -3);
    const n = 20000;
    const got = sample(Array.from({ length: n }, () => logits), Array.from({ length: n }, (_, step) => ({ ...params, seed: 31337, step })));
    const want = new Array(logits.length).fill(0);
    const dist = ref.samplingDistribution(logits, params.temperature, params.topK, params.topP);
    dist.ids.forEach((id, i) => (want[id] = dist.probs[i]));
    const counts = new Array(logits.length).fill(0);
    for (const id of got) counts[id] += 1;
    counts.forEach((c, id) => {
      const p = want[id];
      expect(Math.abs(c / n - p), `token ${id}: ${c / n} vs ${p}`).toBeLessThanOrEqual(5 * Math.sqrt((p * (1 - p)) / n) + 1e-3);
    });
  });

  it('rejects bad arguments, naming them', () => {
    const logits = f32([2, 5], new Float32Array(10));
    const out = addon.empty('i32', [2]);
    const temp = f32([2], [1, 1]);
    const topK = i32([2], [0, 0]);
    const topP = f32([2], [1, 1]);
    const seeds = i64([2], [1, 2]);
    const steps = i32([2], [0, 0]);
    expectOpError(() => addon.sample(out, logits, temp, topK, topP, i32([2], [1, 2]), steps), /^sample: seeds must be i64/);
    expectOpError(() => addon.sample(out, logits, temp, i32([3], [0, 0, 0]), topP, seeds, steps), /^sample: topK must be \[2\]/);
    expectOpError(() => addon.sample(out, addon.zeros('bf16', [2, 5]), temp, topK, topP, seeds, steps), /^sample: logits must be f32/);
    expectOpError(() => addon.sample(out, addon.zeros('f32', [2, 0]), temp, topK, topP, seeds, steps), /^sample: logits must have a vocabulary/);
    expectOpError(() => addon.sample(addon.empty('f32', [2]), logits, temp, topK, topP, seeds, steps), /^sample: outIds must be i32/);
    expectOpError(() => addon.sample(out, logits, temp, topK, topP, seeds, f32([2], [0, 0])), /^sample: steps must be i32/);
  });
});

describe('logprobs', () => {
  /** One logprobs() call with k top entries per row. */
  function logprobs(logits: Float32Array, n: number, vocab: number, chosen: number[], k: number) {
    const chosenLp = addon.empty('f32', [n]);
    const topIds = addon.empty('i32', [n, k]);
    const topLp = addon.empty('f32', [n, k]);
    addon.logprobs(chosenLp, topIds, topLp, f32([n, vocab], logits), i32([n], chosen));
    return { chosen: floats(chosenLp), topIds: ints(topIds), topLp: floats(topLp) };
  }

  describe.each(ODD_SIZES)('vocab %i', (vocab) => {
    it.each([...new Set([0, 1, Math.min(5, vocab), vocab])])('k = %i: chosen and top-k logprobs match float64 log-softmax', (k) => {
      const rng = new Rng(vocab * 10 + k);
      const n = 4;
      const logits = rng.floats(n * vocab, -30, 30);
      const chosen = Array.from(rng.ints(n, 0, vocab));
      const got = logprobs(logits, n, vocab, chosen, k);
      const wantChosen: number[] = [];
      const wantIds: number[] = [];
      const wantLp: number[] = [];
      for (let r = 0; r < n; ++r) {
        const row = logits.subarray(r * vocab, (r + 1) * vocab);
        const lp = ref.logSoftmax(row);
        wantChosen.push(lp[chosen[r]]);
        const top = ref.ranked(row).slice(0, k);
        wantIds.push(...top);
        wantLp.push(...top.map((id) => lp[id]));
      }
      expectClose(got.chosen, wantChosen);
      expectSame(got.topIds, wantIds);
      expectClose(got.topLp, wantLp);
    });
  });

  it('rejects bad arguments, naming them', () => {
    const logits = f32([2, 5], new Float32Array(10));
    const call = (o: { chosen?: number[]; k?: number; topLpShape?: number[]; chosenLp?: number[] }) => () =>
      addon.logprobs(
        addon.empty('f32', o.chosenLp ?? [2]), addon.empty('i32', [2, o.k ?? 2]), addon.empty('f32', o.topLpShape ?? [2, o.k ?? 2]),
        logits, i32([2], o.chosen ?? [0, 4]),
      );
    call({})();
    expectOpError(call({ chosen: [0, 5] }), /^logprobs: chosen\[1\] = 5 is outside \[0, 5\)/);
    expectOpError(call({ chosen: [-1, 0] }), /^logprobs: chosen\[0\] = -1/);
    expectOpError(call({ k: 6 }), /^logprobs: topIds asks for 6 tokens of a 5-token vocabulary/);
    expectOpError(call({ topLpShape: [2, 3] }), /^logprobs: topLogprobs must be \[2, 2\]/);
    expectOpError(call({ chosenLp: [3] }), /^logprobs: chosenLogprobs must be \[2\]/);
    expectOpError(
      () => addon.logprobs(addon.empty('f32', [2]), addon.empty('i32', [2, 1]), addon.empty('f32', [2, 1]), logits, f32([2], [0, 1])),
      /^logprobs: chosen must be i32/,
    );
  });
});
