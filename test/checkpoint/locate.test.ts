import { describe, expect, it } from 'vitest';
import { parseModelConfig } from '../../lib/checkpoint/config.js';
import { QWEN3_RULES } from '../../lib/checkpoint/families/qwen3.js';
import { locateModule, moduleNames } from '../../lib/checkpoint/locate.js';
import { llamaConfigJson, qwen3ConfigJson } from './helpers.js';

describe('locateModule', () => {
  const llama = parseModelConfig(llamaConfigJson()); // q 16 rows, k/v 8 rows, inter 24
  const qwen3 = parseModelConfig(qwen3ConfigJson()); // head_dim 8: q 32 rows, k/v 16 rows

  const forms = (p: string): string[] => [`base_model.model.${p}`, p];

  it('k_proj lands on layers.<i>.qkv right after q', () => {
    for (const path of [...forms('model.layers.1.self_attn.k_proj'), 'layers.1.self_attn.k_proj']) {
      expect(locateModule(llama, 'llama', path)).toEqual({
        hf: 'model.layers.1.self_attn.k_proj', engine: 'layers.1.qkv', layer: 1, kind: 'linear',
        rowOffset: 16, rows: 8, cols: 16, shardDim: 0,
      });
    }
    expect(locateModule(qwen3, 'qwen3', 'base_model.model.model.layers.0.self_attn.v_proj'))
      .toMatchObject({ engine: 'layers.0.qkv', rowOffset: 48, rows: 16, cols: 16 });
  });

  it('up_proj lands on gate_up after gate; o_proj is row-parallel', () => {
    for (const path of forms('model.layers.0.mlp.up_proj')) {
      expect(locateModule(llama, 'llama', path)).toMatchObject({ engine: 'layers.0.gate_up', rowOffset: 24, rows: 24, cols: 16, shardDim: 0 });
    }
    for (const path of forms('model.layers.1.self_attn.o_proj')) {
      expect(locateModule(qwen3, QWEN3_RULES, path)).toMatchObject({ engine: 'layers.1.o', rowOffset: 0, rows: 16, cols: 32, shardDim: 1 });
    }
  });

  it('lm_head and embed_tokens, tied or not', () => {
    for (const path of forms('lm_head')) {
      expect(locateModule(llama, 'llama', path)).toEqual({
        hf: 'lm_head', engine: 'lm_head', layer: null, kind: 'linear', rowOffset: 0, rows: 32, cols: 16, shardDim: 0,
      });
      expect(locateModule(qwen3, 'qwen3', path)).toMatchObject({ engine: 'lm_head', tiedTo: 'embed' });
    }
    for (const path of [...forms('model.embed_tokens'), 'embed_tokens']) {
      expect(locateModule(llama, 'llama', path)).toMatchObject({ engine: 'embed', kind: 'embedding', rows: 32, cols: 16 });
    }
  });

  it('unknown modules, layers past the end and qwen3-only norms on llama are undefined', () => {
    expect(locateModule(llama, 'llama', 'model.layers.2.self_attn.q_proj')).toBeUndefined();
    expect(locateModule(llama, 'llama', 'model.layers.0.mlp.experts.0.up_proj')).toBeUndefined();
    expect(locateModule(llama, 'llama', 'model.layers.0.self_attn.q_norm')).toBeUndefined();
    expect(locateModule(qwen3, 'qwen3', 'model.layers.0.self_attn.q_norm')).toMatchObject({ engine: 'layers.0.q_norm', kind: 'norm', rows: 8, cols: null });
  });
});

describe('moduleNames', () => {
  it('lists every linear module path, in engine order', () => {
    const names = moduleNames(parseModelConfig(llamaConfigJson()));
    expect(names.slice(0, 7)).toEqual([
      'model.layers.0.self_attn.q_proj', 'model.layers.0.self_attn.k_proj', 'model.layers.0.self_attn.v_proj',
      'model.layers.0.self_attn.o_proj', 'model.layers.0.mlp.gate_proj', 'model.layers.0.mlp.up_proj',
      'model.layers.0.mlp.down_proj',
    ]);
    expect(names).toHaveLength(2 * 7 + 1);
    expect(names.at(-1)).toBe('lm_head');
  });
});
