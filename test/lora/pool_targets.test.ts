// The adapter pool's targets when serve.yaml names none: the listed adapters' own where no
// adapter can come later, else every target; the engine's limits and pool follow them.
import { beforeAll, describe, expect, it } from 'vitest';

import { locateModule } from '../../lib/checkpoint/locate.js';
import { memoryBesidesKv } from '../../lib/engine/memory.js';
import { engineLimits, type EngineOptions } from '../../lib/engine/options.js';
import { ALL_TARGETS } from '../../lib/lora/adapter.js';
import { poolTargets } from '../../lib/lora/pool_targets.js';
import { CPU } from '../../lib/models/index.js';
import { engine, tinyModel } from '../engine/helpers.js';
import { writeAdapter, type ModuleSpec } from './make_adapter.js';

const config = tinyModel().config;
const layers = [0, 1];

function specs(paths: string[], rank: number): ModuleSpec[] {
  return paths.map((path) => {
    const loc = locateModule(config, config.family, path)!;
    return loc.kind === 'embedding' ? { path, rank, in: loc.rows, out: loc.cols!, embedding: true } : { path, rank, in: loc.cols!, out: loc.rows };
  });
}

const adapters: Record<string, { name: string; path: string }> = {};

beforeAll(async () => {
  const qv = layers.flatMap((l) => [`model.layers.${l}.self_attn.q_proj`, `model.layers.${l}.self_attn.v_proj`]);
  const down = layers.map((l) => `model.layers.${l}.mlp.down_proj`);
  adapters.qv = { name: 'qv', path: (await writeAdapter(specs(qv, 4), { r: 4, lora_alpha: 8, target_modules: ['q_proj', 'v_proj'] }, 1)).dir };
  adapters.head = {
    name: 'head',
    path: (await writeAdapter(specs([...down, 'lm_head'], 4), { r: 4, lora_alpha: 8, target_modules: ['down_proj', 'lm_head'] }, 2)).dir,
  };
});

describe('poolTargets', () => {
  it("takes the listed adapters' own targets, in ALL_TARGETS' order, where runtime updates are off", () => {
    expect(poolTargets(config, { maxRank: 8, adapters: [adapters.head, adapters.qv] })).toEqual(['q_proj', 'v_proj', 'down_proj', 'lm_head']);
    expect(poolTargets(config, { maxRank: 8, runtimeUpdates: false, adapters: [adapters.qv] })).toEqual(['q_proj', 'v_proj']);
  });

  it('takes every target where an adapter may be loaded later, or none is listed', () => {
    expect(poolTargets(config, { maxRank: 8, runtimeUpdates: true, adapters: [adapters.qv] })).toEqual(ALL_TARGETS);
    expect(poolTargets(config, { maxRank: 8, adapters: [] })).toEqual(ALL_TARGETS);
  });

  it("takes serve.yaml's targets as they are", () => {
    expect(poolTargets(config, { targets: ['o_proj'], maxRank: 8, adapters: [adapters.qv] })).toEqual(['o_proj']);
  });

  it('refuses a listed adapter as loading it would', () => {
    expect(() => poolTargets(config, { maxRank: 2, adapters: [adapters.qv] })).toThrow(/adapter qv: .*rank 4 is above the pool's max_rank 2/);
  });
});

describe('the engine on the default targets', () => {
  const base: EngineOptions = { model: '', device: 'cpu', maxBatchSize: 4, maxNumBatchedTokens: 64, kvCache: { blockSize: 16, numBlocks: 8 }, prefixCache: true };
  const lora = { slots: 2, maxRank: 8, hostCache: 2 };

  it('sizes the pool on them: less memory than every target takes', () => {
    const limits = engineLimits(config, { ...base, lora: { ...lora, adapters: [adapters.qv] } }, CPU);
    expect(limits.lora!.targets).toEqual(['q_proj', 'v_proj']);
    const plan = (targets: string[]) => memoryBesidesKv(config, { ...base, maxNumBatchedTokens: 64, lora: { ...lora, targets } }, CPU, false);
    expect(plan(limits.lora!.targets).loraPool).toBeLessThan(plan(ALL_TARGETS).loraPool);
  });

  it('serves the listed adapter, and refuses one that targets more, naming the targets', async () => {
    const limits = engineLimits(config, { ...base, lora: { ...lora, adapters: [adapters.qv] } }, CPU);
    const e = engine({ lora: limits.lora });
    expect([...e.lora!.weights.targets.keys()].every((name) => /\.qkv$/.test(name))).toBe(true);
    await e.loadAdapter('qv', adapters.qv.path);
    await expect(e.loadAdapter('head', adapters.head.path)).rejects.toThrow(/target down_proj is not enabled in resources\.lora\.targets \(q_proj, v_proj\)/);
    expect(e.lora!.list().map((a) => a.name)).toEqual(['qv']);
  });
});
