// The engine's scheduling must never change what a request generates: batching, chunked
// prefill, preemption and the prefix cache all give each request its tokens run alone.
import { describe, expect, it } from 'vitest';

import type { EngineLimits } from '../../lib/engine/engine.js';
import { readParityFixture } from '../parity/fixture.js';
import { engine, greedy, prompts, runAll } from './helpers.js';

const lengths = [1, 3, 9, 16, 17, 31, 33, 40, 5, 64, 2, 15, 48, 7, 20, 90];
const reqs = prompts(lengths);

function alone(p: number[], maxTokens: number): number[] {
  const e = engine();
  e.add({ id: 'x', promptIds: p, params: greedy(maxTokens) });
  return runAll(e).get('x')!.tokens;
}

// Each case also runs with overlapped steps (each decode step enqueued before the previous
// one's samples are read; on the GPU the default): a request's tokens must not change.
describe.each([false, true])('engine scheduling (overlapped steps: %s)', (overlapSteps) => {
  const make = (limits: Partial<EngineLimits> = {}) => engine({ overlapSteps, ...limits });
  const expected = reqs.map((p, i) => alone(p, 4 + (i % 5)));

  it('reproduces the HF greedy tokens for the fixture prompts', () => {
    const fx = readParityFixture('tiny-qwen3');
    const e = make();
    fx.cases.forEach((c, i) => e.add({ id: `${i}`, promptIds: c.promptIds, params: greedy(c.outputIds.length) }));
    const out = runAll(e);
    fx.cases.forEach((c, i) => expect(out.get(`${i}`)!.tokens).toEqual(c.outputIds));
  });

  it('16 concurrent requests of mixed lengths get the tokens each gets alone', () => {
    const e = make();
    reqs.forEach((p, i) => e.add({ id: `${i}`, promptIds: p, params: greedy(4 + (i % 5)) }));
    const out = runAll(e);
    reqs.forEach((_, i) => {
      expect(out.get(`${i}`)!.tokens).toEqual(expected[i]);
      expect(out.get(`${i}`)!.last.finishReason).toBe('length');
    });
    expect(e.stats().running + e.stats().waiting).toBe(0);
  });

  it('chunked prefill under a small token budget and a small batch changes nothing', () => {
    const e = make({ maxNumBatchedTokens: 11, maxBatchSize: 3 });
    reqs.forEach((p, i) => e.add({ id: `${i}`, promptIds: p, params: greedy(4 + (i % 5)) }));
    const out = runAll(e);
    reqs.forEach((_, i) => expect(out.get(`${i}`)!.tokens).toEqual(expected[i]));
  });

  it('preempts under a tiny KV budget and still completes every request correctly', () => {
    // 12 tokens each: the running requests outgrow the cache while they decode.
    const some = reqs.slice(0, 9);
    const e = make({ numBlocks: 20, blockSize: 4 });
    some.forEach((p, i) => e.add({ id: `${i}`, promptIds: p, params: greedy(12) }));
    const out = runAll(e);
    some.forEach((p, i) => expect(out.get(`${i}`)!.tokens).toEqual(alone(p, 12)));
    expect(e.stats().preemptions).toBeGreaterThan(0);
    expect(e.stats().kvBlocksUsed).toBe(0);
  });

  it('serves a repeated prefix from the cache with the same tokens', () => {
    const e = make({ blockSize: 4 });
    const p = reqs[15];
    e.add({ id: 'a', promptIds: p, params: greedy(6) });
    const first = runAll(e).get('a')!;
    e.add({ id: 'b', promptIds: p, params: greedy(6) });
    const second = runAll(e).get('b')!;
    expect(second.tokens).toEqual(first.tokens);
    expect(first.last.cachedPromptTokens).toBe(0);
    expect(second.last.cachedPromptTokens).toBe(88);  // 22 full blocks of 4, leaving 2 tokens to run
    expect(e.stats().prefixCacheHits).toBe(88);
  });

  it('abort frees the request and its blocks at once', () => {
    const e = make();
    e.add({ id: 'a', promptIds: reqs[9], params: greedy(50) });
    e.step();
    expect(e.stats().kvBlocksUsed).toBeGreaterThan(0);
    expect(e.abort('a')!.finishReason).toBe('abort');
    expect(e.stats().kvBlocksUsed).toBe(0);
    expect(e.hasWork()).toBe(false);
  });

  it('stops at EOS and at stop token ids, but not before min_tokens', () => {
    const p = reqs[3];
    const free = alone(p, 8);
    const stopAt = free[3];
    const e = make();
    e.add({ id: 's', promptIds: p, params: greedy(8, { stopTokenIds: [stopAt] }) });
    e.add({ id: 'm', promptIds: p, params: greedy(8, { stopTokenIds: [stopAt], minTokens: 8 }) });
    const out = runAll(e);
    const idx = free.indexOf(stopAt);
    expect(out.get('s')!.tokens).toEqual(free.slice(0, idx + 1));
    expect(out.get('s')!.last).toMatchObject({ finishReason: 'stop', stopTokenId: stopAt });
    // Before min_tokens the stop token cannot even be drawn (as vLLM): the run differs from
    // `free` from where stopAt first appeared, and holds it nowhere in its first 7 tokens.
    const m = out.get('m')!.tokens;
    expect(m.slice(0, idx)).toEqual(free.slice(0, idx));
    expect(m.slice(0, 7)).not.toContain(stopAt);
    expect(m).toHaveLength(8);
  });

  it('reports the model\'s logprobs before the min_tokens mask, as vLLM does', () => {
    const p = reqs[3];
    const stopAt = alone(p, 1)[0];  // the free run's first token, banned by min_tokens below
    const e = make();
    e.add({ id: 'free', promptIds: p, params: greedy(1, { logprobs: 3 }) });
    e.add({ id: 'masked', promptIds: p, params: greedy(1, { logprobs: 3, stopTokenIds: [stopAt], minTokens: 2 }) });
    const last = (id: string) => runAllOf.get(id)!.last.logprobs![0];
    const runAllOf = runAll(e);
    expect(last('masked').tokenId).not.toBe(stopAt);  // it could not be drawn...
    expect(last('masked').top).toEqual(last('free').top);  // ...but the reported distribution is the model's
    expect(last('masked').top[0][0]).toBe(stopAt);
  });

  it('refuses sampling parameters the sampler cannot take, before anything changes', () => {
    const e = make();
    for (const [extra, message] of [
      [{ temperature: NaN }, /temperature NaN is not a number >= 0/], [{ temperature: -1 }, /temperature -1/],
      [{ topP: 0 }, /top_p 0 is not in \(0, 1\]/], [{ topK: 1.5 }, /top_k 1.5 is not an integer >= 0/],
    ] as const) {
      expect(() => e.add({ id: 'x', promptIds: reqs[0], params: greedy(2, extra) })).toThrow(message);
    }
    expect(e.hasWork()).toBe(false);
  });

  it('seeded sampling draws the same tokens alone and in a batch', () => {
    const params = greedy(10, { temperature: 0.9, topK: 50, topP: 0.95, seed: 1234 });
    const solo = make();
    solo.add({ id: 'x', promptIds: reqs[4], params });
    const a = runAll(solo).get('x')!.tokens;
    const batch = make({ maxNumBatchedTokens: 13 });
    reqs.forEach((p, i) => batch.add({ id: `${i}`, promptIds: p, params: i === 4 ? params : greedy(3) }));
    expect(runAll(batch).get('4')!.tokens).toEqual(a);
  });

  it('refuses requests it can never run, changing nothing', () => {
    const e = make({ numBlocks: 4, blockSize: 4 });
    expect(() => e.add({ id: 'a', promptIds: [], params: greedy(1) })).toThrow(/prompt is empty/);
    expect(() => e.add({ id: 'a', promptIds: [99999], params: greedy(1) })).toThrow(/not in the vocabulary/);
    expect(() => e.add({ id: 'a', promptIds: reqs[0], params: greedy(300) })).toThrow(/256-token limit/);
    expect(() => e.add({ id: 'a', promptIds: reqs[7], params: greedy(1) })).toThrow(/KV blocks/);
    expect(e.hasWork()).toBe(false);
  });

  it('returns logprobs of the chosen token and the top tokens', () => {
    const fx = readParityFixture('tiny-qwen3');
    const c = fx.cases[2];
    const e = make();
    e.add({ id: 'l', promptIds: c.promptIds, params: greedy(3, { logprobs: 5 }) });
    const outs = [];
    while (e.hasWork()) outs.push(...e.step());
    outs.forEach((o, step) => {
      const lp = o.logprobs![0];
      expect(lp.tokenId).toBe(c.outputIds[step]);
      expect(lp.top.map(([id]) => id)).toEqual(c.topLogprobs[step].map(([id]) => id));
      expect(Math.abs(lp.logprob - c.topLogprobs[step][0][1])).toBeLessThan(1e-4);
    });
  });
});

describe('engine liveness', () => {
  it('waiting requests never hold KV blocks, so a full cache cannot stall', () => {
    // A long request fills most of the cache; five more arrive and share a cached prefix.
    const e = engine({ numBlocks: 24, blockSize: 4 });
    const long = prompts([20], 512, 3)[0];
    e.add({ id: 'long', promptIds: long, params: greedy(70) });
    e.step();
    e.step();
    const ps = prompts([30, 25, 40, 12, 33], 512, 11);
    ps.forEach((p, i) => e.add({ id: `${i}`, promptIds: p, params: greedy(12) }));
    const done: string[] = [];
    for (let n = 0; e.hasWork() && n < 2000; n++) {
      for (const o of e.step()) if (o.finishReason) done.push(o.id);
    }
    expect(done.sort()).toEqual(['0', '1', '2', '3', '4', 'long']);
    expect(e.stats().preemptions).toBeGreaterThan(0);
    expect(e.stats().kvBlocksUsed).toBe(0);
  });
});
