import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { openCheckpoint } from '../../lib/checkpoint/checkpoint.js';
import { parseModelConfig, type ModelConfig } from '../../lib/checkpoint/config.js';
import { CheckpointError } from '../../lib/checkpoint/errors.js';
import { planWeights, type WeightPlan } from '../../lib/checkpoint/plan.js';
import { hfTensors, llamaConfigJson, qwen3ConfigJson, tempDir, writeTensors, type Spec, type TinyModel } from './helpers.js';

// vocab 32, hidden 16, inter 24, 2 layers, 4 heads / 2 kv heads
const LLAMA: TinyModel = { vocab: 32, hidden: 16, inter: 24, layers: 2, qOut: 16, kvOut: 8, headDim: 4 };
// Qwen3 with head_dim 8 ≠ hidden/heads = 4: q is 32 rows, k/v 16 rows, o is [16, 32]
const QWEN3: TinyModel = { vocab: 32, hidden: 16, inter: 24, layers: 2, qOut: 32, kvOut: 16, headDim: 8, qkNorm: true, lmHead: false };

async function checkpointWith(specs: Spec[]): Promise<ReturnType<typeof openCheckpoint>> {
  const dir = tempDir();
  await writeTensors(join(dir, 'model.safetensors'), specs);
  return openCheckpoint(dir);
}

function byName(plans: WeightPlan[]): Map<string, WeightPlan> {
  return new Map(plans.map((p) => [p.name, p]));
}

function sources(p: WeightPlan): [string, number, number][] {
  return p.sources.map((s) => [s.entry.key, s.rowOffset, s.rows]);
}

async function planError(config: ModelConfig, specs: Spec[]): Promise<CheckpointError> {
  const ck = await checkpointWith(specs);
  try {
    planWeights(config, ck);
  } catch (e) {
    expect(e).toBeInstanceOf(CheckpointError);
    return e as CheckpointError;
  }
  throw new Error('expected planWeights to fail');
}

describe('planWeights', () => {
  const llama = parseModelConfig(llamaConfigJson());
  const qwen3 = parseModelConfig(qwen3ConfigJson());

  it('fuses q/k/v and gate/up for GQA Llama with row offsets, in a stable order', async () => {
    const plans = planWeights(llama, await checkpointWith(hfTensors(LLAMA)));
    expect(plans.map((p) => p.name)).toEqual([
      'embed',
      'layers.0.attn_norm', 'layers.0.qkv', 'layers.0.o', 'layers.0.mlp_norm', 'layers.0.gate_up', 'layers.0.down',
      'layers.1.attn_norm', 'layers.1.qkv', 'layers.1.o', 'layers.1.mlp_norm', 'layers.1.gate_up', 'layers.1.down',
      'final_norm', 'lm_head',
    ]);
    const m = byName(plans);
    const qkv = m.get('layers.1.qkv')!;
    expect(qkv).toMatchObject({ kind: 'linear', layer: 1, shape: [32, 16], dtype: 'bf16', shardDim: 0 });
    expect(sources(qkv)).toEqual([
      ['model.layers.1.self_attn.q_proj.weight', 0, 16],
      ['model.layers.1.self_attn.k_proj.weight', 16, 8],
      ['model.layers.1.self_attn.v_proj.weight', 24, 8],
    ]);
    const gateUp = m.get('layers.0.gate_up')!;
    expect(gateUp.shape).toEqual([48, 16]);
    expect(sources(gateUp)).toEqual([['model.layers.0.mlp.gate_proj.weight', 0, 24], ['model.layers.0.mlp.up_proj.weight', 24, 24]]);
    expect(m.get('layers.0.o')).toMatchObject({ shape: [16, 16], shardDim: 1 });
    expect(m.get('layers.0.down')).toMatchObject({ shape: [16, 24], shardDim: 1 });
    expect(m.get('layers.0.attn_norm')).toMatchObject({ kind: 'norm', shape: [16], shardDim: null });
    expect(m.get('embed')).toMatchObject({ kind: 'embedding', shape: [32, 16], shardDim: 0 });
    expect(m.get('lm_head')!.tiedTo).toBeUndefined();
    expect(sources(m.get('lm_head')!)).toEqual([['lm_head.weight', 0, 32]]);
  });

  it('plans Qwen3 with head_dim ≠ hidden/heads, q/k norms and a tied lm_head', async () => {
    const plans = planWeights(qwen3, await checkpointWith(hfTensors(QWEN3)));
    const m = byName(plans);
    expect(plans.slice(1, 9).map((p) => p.name)).toEqual([
      'layers.0.attn_norm', 'layers.0.qkv', 'layers.0.q_norm', 'layers.0.k_norm',
      'layers.0.o', 'layers.0.mlp_norm', 'layers.0.gate_up', 'layers.0.down',
    ]);
    expect(m.get('layers.0.qkv')!.shape).toEqual([64, 16]);
    expect(sources(m.get('layers.0.qkv')!).map(([, off, rows]) => [off, rows])).toEqual([[0, 32], [32, 16], [48, 16]]);
    expect(m.get('layers.0.o')!.shape).toEqual([16, 32]);
    expect(m.get('layers.0.q_norm')).toMatchObject({ kind: 'norm', shape: [8], shardDim: null });
    const head = m.get('lm_head')!;
    expect(head.tiedTo).toBe('embed');
    expect(head.kind).toBe('linear');
    expect(sources(head)).toEqual([['model.embed_tokens.weight', 0, 32]]);
  });

  it('ignores a stored lm_head.weight when embeddings are tied, like transformers', async () => {
    const plans = planWeights(qwen3, await checkpointWith(hfTensors({ ...QWEN3, lmHead: true })));
    expect(byName(plans).get('lm_head')!.sources[0].entry.key).toBe('model.embed_tokens.weight');
  });

  it('plans attention biases as <name>.bias, sharded like their weight only when column-parallel', async () => {
    const config = parseModelConfig(llamaConfigJson({ attention_bias: true }));
    const m = byName(planWeights(config, await checkpointWith(hfTensors({ ...LLAMA, attentionBias: true }))));
    const bias = m.get('layers.0.qkv.bias')!;
    expect(bias).toMatchObject({ kind: 'bias', shape: [32], shardDim: 0 });
    expect(sources(bias)).toEqual([
      ['model.layers.0.self_attn.q_proj.bias', 0, 16],
      ['model.layers.0.self_attn.k_proj.bias', 16, 8],
      ['model.layers.0.self_attn.v_proj.bias', 24, 8],
    ]);
    expect(m.get('layers.0.o.bias')).toMatchObject({ shape: [16], shardDim: null });
  });

  it('reads parts spread over shards', async () => {
    const dir = tempDir();
    const specs = hfTensors(LLAMA);
    const half = specs.findIndex((s) => s.name.includes('self_attn.k_proj'));
    await writeTensors(join(dir, 'a.safetensors'), specs.slice(0, half));
    await writeTensors(join(dir, 'b.safetensors'), specs.slice(half));
    const { writeFileSync } = await import('node:fs');
    writeFileSync(join(dir, 'model.safetensors.index.json'), JSON.stringify({
      weight_map: Object.fromEntries(specs.map((s, i) => [s.name, i < half ? 'a.safetensors' : 'b.safetensors'])),
    }));
    const qkv = byName(planWeights(llama, openCheckpoint(dir))).get('layers.0.qkv')!;
    expect(qkv.sources.map((s) => s.entry.file)).toEqual([join(dir, 'a.safetensors'), join(dir, 'b.safetensors'), join(dir, 'b.safetensors')]);
  });

  it('a wrong shape names file, key, expected shape with its config keys, and actual shape', async () => {
    const specs = hfTensors(LLAMA).map((s) =>
      (s.name === 'model.layers.1.self_attn.k_proj.weight' ? { ...s, shape: [16, 16] } : s));
    const e = await planError(llama, specs);
    expect(e.message).toMatch(
      /model\.safetensors: tensor "model\.layers\.1\.self_attn\.k_proj\.weight" has shape \[16, 16\], expected \[8, 16\] \(num_key_value_heads\*head_dim=8, hidden_size=16\)$/);
    expect(e.key).toBe('model.layers.1.self_attn.k_proj.weight');
  });

  it('a missing tensor says what shape was expected', async () => {
    const e = await planError(llama, hfTensors(LLAMA).filter((s) => s.name !== 'model.layers.0.mlp.up_proj.weight'));
    expect(e.message).toMatch(/tensor "model\.layers\.0\.mlp\.up_proj\.weight" is missing from the checkpoint \(expected shape \[24, 16\] \(intermediate_size=24, hidden_size=16\)\)/);
  });

  it('an untied model without lm_head.weight is an error', async () => {
    const e = await planError(llama, hfTensors({ ...LLAMA, lmHead: false }));
    expect(e.message).toMatch(/tensor "lm_head\.weight" is missing .*vocab_size=32, hidden_size=16/);
  });

  it('fused parts with different dtypes are an error', async () => {
    const specs = hfTensors(LLAMA).map((s): Spec =>
      (s.name === 'model.layers.0.self_attn.v_proj.weight' ? { ...s, dtype: 'F32' } : s));
    const e = await planError(llama, specs);
    expect(e.message).toMatch(/"model\.layers\.0\.self_attn\.v_proj\.weight" is F32 but "model\.layers\.0\.self_attn\.q_proj\.weight", fused with it into layers\.0\.qkv, is BF16/);
  });

  it('norms may be F32 while linears are BF16', async () => {
    const specs = hfTensors(LLAMA).map((s): Spec => (s.name.endsWith('norm.weight') ? { ...s, dtype: 'F32' } : s));
    const m = byName(planWeights(llama, await checkpointWith(specs)));
    expect(m.get('final_norm')!.dtype).toBe('f32');
    expect(m.get('layers.0.qkv')!.dtype).toBe('bf16');
  });

  it('ignores buffers such as rotary inv_freq', async () => {
    const specs = [...hfTensors(LLAMA), { name: 'model.layers.0.self_attn.rotary_emb.inv_freq', shape: [2], dtype: 'F32' as const }];
    expect(planWeights(llama, await checkpointWith(specs))).toHaveLength(15);
  });

  it('refuses MoE expert weights, stray biases and layers past num_hidden_layers', async () => {
    const moe = await planError(llama, [...hfTensors(LLAMA), { name: 'model.layers.0.mlp.experts.0.up_proj.weight', shape: [24, 16] }]);
    expect(moe.message).toMatch(/tensor "model\.layers\.0\.mlp\.experts\.0\.up_proj\.weight": MoE experts are not supported/);
    expect(moe.key).toBe('model.layers.0.mlp.experts.0.up_proj.weight');

    const bias = await planError(llama, [...hfTensors(LLAMA), { name: 'model.layers.1.self_attn.q_proj.bias', shape: [16] }]);
    expect(bias.message).toMatch(/"model\.layers\.1\.self_attn\.q_proj\.bias": not a parameter of any llama module.*attention_bias=false/);

    const extra = await planError(llama, [...hfTensors(LLAMA), { name: 'model.layers.2.input_layernorm.weight', shape: [16] }]);
    expect(extra.message).toMatch(/layer 2 is beyond num_hidden_layers=2/);
  });
});
