// Builds engines on the tiny fixture models and runs requests to completion.
import { Engine, type EngineLimits } from '../../lib/engine/engine.js';
import type { RequestOutput, SamplingParams } from '../../lib/engine/types.js';
import { loadModel, type Model } from '../../lib/models/index.js';
import { FIXTURES } from '../parity/fixture.js';

const models = new Map<string, Model>();

export function tinyModel(name = 'tiny-qwen3'): Model {
  if (!models.has(name)) models.set(name, loadModel(`${FIXTURES}/models/${name}`));
  return models.get(name)!;
}

export function engine(limits: Partial<EngineLimits> = {}, name?: string): Engine {
  return new Engine(tinyModel(name), {
    maxModelLen: 256, maxBatchSize: 64, maxNumBatchedTokens: 512, blockSize: 16, numBlocks: 256, prefixCache: true,
    ...limits,
  });
}

export function greedy(maxTokens: number, extra: Partial<SamplingParams> = {}): SamplingParams {
  return {
    maxTokens, temperature: 0, topP: 1, topK: 0, seed: null, stopTokenIds: [], ignoreEos: true, minTokens: 0,
    logprobs: null, ...extra,
  };
}

/** Steps the engine until idle; returns every request's generated tokens and final output. */
export function runAll(e: Engine): Map<string, { tokens: number[]; last: RequestOutput }> {
  const out = new Map<string, { tokens: number[]; last: RequestOutput }>();
  for (let guard = 0; e.hasWork(); guard++) {
    if (guard > 10000) throw new Error('engine did not finish');
    for (const o of e.step()) {
      const r = out.get(o.id) ?? { tokens: [], last: o };
      r.tokens.push(...o.newTokenIds);
      r.last = o;
      out.set(o.id, r);
    }
  }
  return out;
}

/** Steps until idle; each request's tokens and per-step top logprobs (asked with logprobs > 0). */
export function greedyRuns(e: Engine): Map<string, { ids: number[]; top: [number, number][][] }> {
  const got = new Map<string, { ids: number[]; top: [number, number][][] }>();
  while (e.hasWork()) {
    for (const o of e.step()) {
      const r = got.get(o.id) ?? { ids: [], top: [] };
      r.ids.push(...o.newTokenIds);
      r.top.push(...(o.logprobs ?? []).map((l) => l.top));
      got.set(o.id, r);
    }
  }
  return got;
}

/** Deterministic pseudo-random prompts of the given lengths over the model's vocabulary. */
export function prompts(lengths: number[], vocab = 512, seed = 1): number[][] {
  let s = seed;
  const next = () => ((s = (s * 1103515245 + 12345) % 2 ** 31), s);
  return lengths.map((n) => Array.from({ length: n }, () => 3 + (next() % (vocab - 3))));
}
