// An adapter merged into the pool's weights (MergedWeights, through LoraManager.beforeStep):
// base rows on the merged weights give the adapter's logits, unmerging gives back the
// loaded weights bit for bit, and what cannot merge (an adapter on the embedding or lm_head)
// or must not be overwritten (a merged slot's load) is refused. fp32 on the CPU.
import { performance } from 'node:perf_hooks';

import { ALL_TARGETS } from '../../lib/lora/adapter.js';
import { describe, expect, it, vi } from 'vitest';

import { addon, type Tensor } from '../../lib/addon/index.js';
import { locateModule } from '../../lib/checkpoint/locate.js';
import { LoraManager } from '../../lib/lora/manager.js';
import { MergedWeights } from '../../lib/lora/merged_weights.js';
import { MergeCosts, TRUSTED_AFTER, type MergeCost } from '../../lib/lora/merge_costs.js';
import { EXPLORE_STEPS, LAMBDA, MergePolicy } from '../../lib/lora/merge_policy.js';
import { SlotWeights } from '../../lib/lora/slot_weights.js';
import { loadModel } from '../../lib/models/index.js';
import { FIXTURES } from '../parity/fixture.js';
import { relativeError } from '../parity/greedy_rule.js';
import { writeAdapter, type ModuleSpec } from './make_adapter.js';
import { logits } from './step_logits.js';

const model = loadModel(`${FIXTURES}/models/tiny-llama`, { dtype: 'f32' });
const c = model.config;
const prompts = [[5, 9, 200, 31, 7], [100, 3, 3, 4], [42]];
const LINEARS = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'];

function spec(path: string, rank: number): ModuleSpec {
  const loc = locateModule(c, c.family, path)!;
  return loc.kind === 'embedding' ? { path, rank, in: loc.rows, out: loc.cols!, embedding: true } : { path, rank, in: loc.cols!, out: loc.rows };
}

/** Copies of the model's weights as they are now, to compare with later. */
function snapshot(): Map<string, Tensor> {
  return new Map([...model.weights].map(([name, w]) => [name, w.to('cpu')]));
}

async function pool(modules: ModuleSpec[], targets: string[]): Promise<{ lora: LoraManager; slot: number }> {
  const { dir } = await writeAdapter(modules, { r: 8, lora_alpha: 16, target_modules: targets }, 21);
  const lora = new LoraManager(model, { slots: 2, maxRank: 8, hostCache: 2, targets: ALL_TARGETS, mergeAfterSteps: 2 });
  await lora.register('a', dir);
  const slot = lora.acquire(lora.keyOf('a')!) as number;
  model.lora = lora.weights;
  return { lora, slot };
}

/** A pool whose adapter (on down_proj of layer 0) is merged after its two steps alone. */
async function mergedDownProj(): Promise<{ lora: LoraManager }> {
  const got = await pool([spec('model.layers.0.mlp.down_proj', 8)], ['down_proj']);
  got.lora.beforeStep([got.slot], false);
  got.lora.beforeStep([got.slot], false);
  expect(got.lora.weights.merged).toBe(got.slot);
  return got;
}

describe('an adapter merged into the weights', () => {
  it("base rows on merged weights give the adapter's logits; unmerging restores the weights exactly", async () => {
    const layers = [0, 1, 2];
    const path = (l: number, m: string) => `model.layers.${l}.${['gate_proj', 'up_proj', 'down_proj'].includes(m) ? 'mlp' : 'self_attn'}.${m}`;
    const { lora, slot } = await pool(LINEARS.flatMap((m) => layers.map((l) => spec(path(l, m), 8))), LINEARS);
    try {
      const loaded = snapshot();
      const adapted = logits(model, prompts, [slot, 0, slot], c.vocabSize);
      lora.beforeStep([slot, slot], false);
      expect(lora.weights.merged).toBe(0);  // one step alone is not a run of two
      lora.beforeStep([slot], false);
      expect(lora.weights.merged).toBe(slot);
      expect(lora.weights.runSlot(slot)).toBe(0);
      expect(lora.stats().merges).toBe(1);
      const merged = logits(model, prompts, [0, 0, 0], c.vocabSize);
      expect(relativeError(merged[0], adapted[0])).toBeLessThan(1e-5);
      expect(relativeError(merged[2], adapted[2])).toBeLessThan(1e-5);
      expect(relativeError(merged[1], adapted[1])).toBeGreaterThan(1e-3);  // a base row now runs the adapter
      expect(() => lora.weights.clear(slot)).toThrow(/slot 1 is merged into the weights; unmerge it before a load/);
      lora.beforeStep([slot, 0], false);  // a base row: unmerged before the step
      expect(lora.weights.merged).toBe(0);
      for (const [name, w] of model.weights) expect(addon.maxAbsDiff(w, loaded.get(name)!), name).toBe(0);
      const again = logits(model, prompts, [slot, 0, slot], c.vocabSize);
      again.forEach((l, i) => expect(relativeError(l, adapted[i])).toBe(0));
      loaded.forEach((t) => t.dispose());
    } finally {
      model.lora = undefined;
      lora.dispose();
    }
  });

  it('an adapter on lm_head or the embedding is never merged; another waiting request defers a merge', async () => {
    const { lora, slot } = await pool([spec('model.layers.1.self_attn.q_proj', 8), spec('lm_head', 8)], ['q_proj', 'lm_head']);
    try {
      for (let i = 0; i < 4; i++) lora.beforeStep([slot], false);
      expect(lora.weights.merged).toBe(0);
      expect(lora.stats().merges).toBe(0);
    } finally {
      model.lora = undefined;
      lora.dispose();
    }
    const q = await pool([spec('model.layers.1.self_attn.q_proj', 8)], ['q_proj']);
    try {
      for (let i = 0; i < 4; i++) q.lora.beforeStep([q.slot], true);
      expect(q.lora.weights.merged).toBe(0);
      q.lora.beforeStep([q.slot], false);
      expect(q.lora.weights.merged).toBe(q.slot);
    } finally {
      model.lora = undefined;
      q.lora.dispose();
    }
  });

  it('a merge that fails partway puts every weight back and merges nothing', async () => {
    const { lora, slot } = await pool(['q_proj', 'o_proj', 'down_proj'].map((m, l) => spec(`model.layers.${l}.${m === 'down_proj' ? 'mlp' : 'self_attn'}.${m}`, 8)), ['q_proj', 'o_proj', 'down_proj']);
    const loaded = snapshot();
    const real = addon.loraMerge;
    let calls = 0;
    const spy = vi.spyOn(addon, 'loraMerge').mockImplementation((...args) => {
      if (++calls === 2) throw new Error('loraMerge: out of memory');
      real(...args);
    });
    try {
      lora.beforeStep([slot], false);
      expect(() => lora.beforeStep([slot], false)).toThrow(/out of memory/);
      expect(calls).toBe(2);
      expect(lora.weights.merged).toBe(0);
      for (const [name, w] of model.weights) expect(addon.maxAbsDiff(w, loaded.get(name)!), name).toBe(0);
    } finally {
      spy.mockRestore();
      loaded.forEach((t) => t.dispose());
      model.lora = undefined;
      lora.dispose();
    }
  });

  it("a rehearsal merges slot 0's zeros and unmerges: the weights exactly as loaded throughout", () => {
    const pool = new SlotWeights(c, 2, 8, new Set(LINEARS), model.weights);
    const merged = new MergedWeights(pool);
    const before = snapshot();
    const seen: [string, number][] = [];
    try {
      merged.rehearse((kind, bytes, f) => {
        seen.push([kind, bytes]);
        f();
        if (kind === 'merge') for (const [name, w] of model.weights) expect(addon.maxAbsDiff(w, before.get(name)!), name).toBe(0);
      });
      expect(seen).toEqual([['merge', merged.bytes], ['unmerge', merged.bytes]]);
      expect(merged.slot).toBe(0);
      for (const [name, w] of model.weights) expect(addon.maxAbsDiff(w, before.get(name)!), name).toBe(0);
    } finally {
      merged.dispose();
      pool.dispose();
      before.forEach((t) => t.dispose());
    }
  });

  it("merge_after_steps 'auto' knows what a merge costs from the start (rehearsed), and the weights stay as loaded", () => {
    const lora = new LoraManager(model, { slots: 2, maxRank: 8, hostCache: 2, targets: ALL_TARGETS, mergeAfterSteps: 'auto' });
    const fixed = new LoraManager(model, { slots: 2, maxRank: 8, hostCache: 2, targets: ALL_TARGETS, mergeAfterSteps: 8 });
    try {
      expect(lora.mergeCostMs()).toBeGreaterThan(0);
      expect(fixed.mergeCostMs()).toBeUndefined();  // a fixed count needs no cost: nothing rehearsed
      expect(lora.stats().merges).toBe(0);
    } finally {
      fixed.dispose();
      lora.dispose();
    }
  });

  it("a merge over another's rewrites W from the loaded copy, as an unmerge and a merge would, bit for bit", async () => {
    const path = (l: number, m: string) => `model.layers.${l}.${m === 'down_proj' ? 'mlp' : 'self_attn'}.${m}`;
    const a = await writeAdapter([spec(path(0, 'q_proj'), 8), spec(path(1, 'down_proj'), 8)], { r: 8, lora_alpha: 16, target_modules: ['q_proj', 'down_proj'] }, 31);
    const b = await writeAdapter([spec(path(1, 'down_proj'), 8), spec(path(2, 'o_proj'), 8)], { r: 8, lora_alpha: 16, target_modules: ['down_proj', 'o_proj'] }, 32);
    const lora = new LoraManager(model, { slots: 2, maxRank: 8, hostCache: 2, targets: ALL_TARGETS });
    await lora.register('a', a.dir);
    await lora.register('b', b.dir);
    const sa = lora.acquire(lora.keyOf('a')!) as number, sb = lora.acquire(lora.keyOf('b')!) as number;
    const merged = new MergedWeights(lora.weights);
    const loaded = snapshot();
    merged.merge(sb);
    const bAlone = snapshot();
    merged.unmerge();
    merged.merge(sa);
    const copies = vi.spyOn(addon, 'copyRegion');
    try {
      merged.merge(sb);
      expect(copies).toHaveBeenCalledTimes(1);  // layer 0's qkv, which b leaves alone; b writes the rest from the loaded copy
      expect(merged.slot).toBe(sb);
      for (const [name, w] of model.weights) expect(addon.maxAbsDiff(w, bAlone.get(name)!), name).toBe(0);
      merged.unmerge();
      for (const [name, w] of model.weights) expect(addon.maxAbsDiff(w, loaded.get(name)!), name).toBe(0);
    } finally {
      copies.mockRestore();
      merged.dispose();
      lora.dispose();
      [loaded, bAlone].forEach((m) => m.forEach((t) => t.dispose()));
    }
  });

  it('disposing a pool with an adapter merged gives the model back its loaded weights', async () => {
    const before = snapshot();
    const { lora } = await mergedDownProj();
    model.lora = undefined;
    lora.dispose();
    for (const [name, w] of model.weights) expect(addon.maxAbsDiff(w, before.get(name)!), name).toBe(0);
    before.forEach((t) => t.dispose());
  });

  it('a pool made on the model while another has an adapter merged takes the loaded weights', async () => {
    const before = snapshot();
    const { lora } = await mergedDownProj();
    const second = new SlotWeights(c, 2, 8, new Set(['down_proj']), model.weights);
    const names = [...second.targets.values()].filter((t) => t.bCol > 0).map((t) => t.name);
    expect(names.length).toBe(c.numLayers);
    for (const name of names) {
      const w = second.baseWeight(name);
      expect(addon.maxAbsDiff(w, before.get(name)!), name).toBe(0);
      w.dispose();
    }
    second.dispose();  // the model's down_proj weights are now its narrowed copies; the rest stay the first pool's
    for (const name of names) expect(addon.maxAbsDiff(model.weights.get(name)!, before.get(name)!), name).toBe(0);
    model.lora = undefined;
    lora.dispose();
    for (const [name, w] of model.weights) expect(addon.maxAbsDiff(w, before.get(name)!), name).toBe(0);
    before.forEach((t) => t.dispose());
  });
});

describe('MergePolicy', () => {
  it('merges after a run of steps of one adapter alone, unmerges before any other step', () => {
    const p = new MergePolicy(3);
    expect([p.next(2, 0, false), p.next(2, 0, false)]).toEqual([undefined, undefined]);
    expect(p.next(2, 0, false)).toBe(2);
    expect(p.next(2, 2, false)).toBeUndefined();  // merged: stays
    expect(p.next(0, 2, false)).toBe(0);  // base rows, or several adapters: unmerge
    expect([p.next(1, 0, false), p.next(2, 0, false), p.next(2, 0, false)]).toEqual([undefined, undefined, undefined]);
    p.forget(2);  // slot 2 got another adapter: its run starts again
    expect([p.next(2, 0, false), p.next(2, 0, false)]).toEqual([undefined, undefined]);
    expect(p.next(2, 0, true)).toBeUndefined();  // a request for something else waits
    expect(p.next(2, 0, false)).toBe(2);
  });

  it("'auto' merges once the overhead a run paid reaches a merge's cost; learns first what is not measured", () => {
    let overhead: number | undefined, cost: MergeCost | undefined;
    const p = new MergePolicy('auto', { overhead: () => overhead, mergeCost: () => cost });
    const run = (slot: number, steps: number, merged = 0) => Array.from({ length: steps }, () => p.next(slot, merged, false, 4));
    // Nothing measured: merged after EXPLORE_STEPS steps, to learn what a merge costs.
    expect(run(1, EXPLORE_STEPS)).toEqual([...Array(EXPLORE_STEPS - 1).fill(undefined), 1]);
    expect(p.next(0, 1, false)).toBe(0);
    // A merge and unmerge cost 1 ms, a step pays 0.25 ms: merged at the fourth step (ski rental).
    cost = { merge: 0.6, unmerge: 0.4 };
    overhead = 0.25;
    expect(run(2, 4)).toEqual([undefined, undefined, undefined, 2]);
    expect(run(2, 3, 2)).toEqual([undefined, undefined, undefined]);  // merged: stays
    expect(p.next(1, 2, false)).toBe(0);  // another adapter, its run not predicted: unmerged; its step counts
    expect(run(1, 3)).toEqual([undefined, undefined, 1]);
    p.next(0, 1, false);
    // A step of as many rows without adapter work not seen yet: merged after EXPLORE_STEPS to see one.
    overhead = undefined;
    expect(run(1, EXPLORE_STEPS).indexOf(1)).toBe(EXPLORE_STEPS - 1);
    p.next(0, 1, false);
    // An overhead of 0 (a large model at one row): a run never pays for a merge.
    overhead = 0;
    expect(run(1, 1000).every((a) => a === undefined)).toBe(true);
    expect(p.next(0, 0, false)).toBeUndefined();
    // The run's length predicted (its requests' max_tokens left): long enough to pay for a merge,
    // merged once it paid LAMBDA of the cost; too short, only once it paid cost / LAMBDA.
    overhead = 0.25;
    const predicted = (slot: number, steps: number, left: number) => Array.from({ length: steps }, () => p.next(slot, 0, false, 4, left));
    expect(predicted(1, 8, 100).indexOf(1)).toBe(Math.ceil(LAMBDA / 0.25) - 1);  // 100 steps × 0.25 ms ≥ 1 ms
    p.next(0, 1, false);
    expect(predicted(1, 16, 1).indexOf(1)).toBe(Math.ceil(1 / LAMBDA / 0.25) - 1);  // at most 1 step more: 0.25 ms < 1 ms
    // Another adapter's run while one is merged: it takes the weights over at its first step
    // where the steps ahead would pay more than a merge alone (no unmerge first), else unmerged.
    expect(p.next(2, 1, false, 4, 3)).toBe(2);  // 3 × 0.25 ≥ 0.6
    expect(p.next(1, 2, false, 4, 2)).toBe(0);  // 2 × 0.25 < 0.6
    expect(p.next(1, 2, true, 4, 100)).toBe(0);  // a request for something else waits
    expect(new MergePolicy(2).next(2, 1, false, 4, 100)).toBe(0);  // a fixed count: unmerged, then counted
    expect(() => new MergePolicy('auto')).toThrow(/needs the run's costs/);
  });
});

describe('MergeCosts', () => {
  it('running means of step times by row bucket, plain against adapted, trusted after TRUSTED_AFTER steps; merge and unmerge per byte; on the CPU by the host clock', () => {
    let now = 0;
    const clock = vi.spyOn(performance, 'now').mockImplementation(() => now);
    const costs = new MergeCosts('cpu');
    const time = (kind: 'plain' | 'adapted' | 'merge' | 'unmerge', size: number, ms: number, times = 1) => {
      for (let i = 0; i < times; i++) {
        const w = costs.start(kind, size);
        now += ms;
        w.stop();
      }
    };
    try {
      time('plain', 3, 1.0, TRUSTED_AFTER);
      time('adapted', 4, 1.5, TRUSTED_AFTER - 1);
      costs.collect();
      expect(costs.overhead(3)).toBeUndefined();  // one adapted step short of trusted
      time('adapted', 4, 1.5);
      expect(costs.overhead(3)).toBeUndefined();  // not taken in before collect()
      costs.collect();
      expect(costs.overhead(3)).toBe(0.5);  // 3 and 4 rows: one bucket
      expect(costs.overhead(5)).toBeUndefined();
      time('plain', 4, 2.0);
      costs.collect();
      expect(costs.overhead(4)).toBeCloseTo(1.5 - (1.0 + 0.2 * (2.0 - 1.0)), 12);  // a running mean, weight 0.2
      time('adapted', 1, 1.0, TRUSTED_AFTER);
      time('plain', 1, 3.0, TRUSTED_AFTER);
      costs.collect();
      expect(costs.overhead(1)).toBe(0);  // never below 0
      expect(costs.overheads()).toEqual([{ rows: 1, ms: 0 }, { rows: 4, ms: costs.overhead(4) }]);
      time('merge', 1000, 2.0);
      costs.collect();
      expect(costs.mergeCost(500)).toBeUndefined();  // no unmerge timed yet
      time('unmerge', 2000, 2.0);
      costs.collect();
      expect(costs.mergeCost(500)!.merge).toBeCloseTo(500 * 2 / 1000, 12);  // one of each is enough (warm rehearsals)
      expect(costs.mergeCost(500)!.unmerge).toBeCloseTo(500 * 2 / 2000, 12);
    } finally {
      clock.mockRestore();
      costs.dispose();
    }
  });
});
