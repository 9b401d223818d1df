import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseModelConfig, readModelConfig } from '../../lib/checkpoint/config.js';
import { CheckpointError } from '../../lib/checkpoint/errors.js';
import { llamaConfigJson, qwen3ConfigJson, tempDir } from './helpers.js';

const LLAMA3_ROPE = {
  theta: 500000, type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4,
  originalMaxPositionEmbeddings: 8192, partialRotaryFactor: 1,
};

describe('parseModelConfig', () => {
  it('reads a transformers-4 Llama 3.1 config (rope_theta + rope_scaling)', () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'config.json'), JSON.stringify(llamaConfigJson()));
    const c = readModelConfig(dir);
    expect(c).toEqual({
      family: 'llama', modelType: 'llama', architectures: ['LlamaForCausalLM'],
      vocabSize: 32, hiddenSize: 16, intermediateSize: 24, numLayers: 2, numHeads: 4, numKvHeads: 2, headDim: 4,
      rmsNormEps: 1e-5, maxPositionEmbeddings: 131072, tieWordEmbeddings: false, attentionBias: false,
      mlpBias: false, qkNorm: false, torchDtype: 'bfloat16', bosTokenId: 1, eosTokenIds: [2, 3],
      rope: LLAMA3_ROPE,
    });
  });

  it('reads a transformers-5 config (rope_parameters holding rope_theta) to the same rope', () => {
    const raw = llamaConfigJson({
      rope_theta: undefined, rope_scaling: undefined, torch_dtype: undefined, dtype: 'bfloat16',
      rope_parameters: {
        rope_type: 'llama3', rope_theta: 500000.0, factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0,
        original_max_position_embeddings: 8192,
      },
    });
    const c = parseModelConfig(raw);
    expect(c.rope).toEqual(LLAMA3_ROPE);
    expect(c.torchDtype).toBe('bfloat16');
  });

  it('accepts the legacy rope_scaling "type" key and linear scaling', () => {
    const c = parseModelConfig(llamaConfigJson({ rope_theta: 10000, rope_scaling: { type: 'linear', factor: 2.0 } }));
    expect(c.rope).toEqual({ theta: 10000, type: 'linear', factor: 2, partialRotaryFactor: 1 });
  });

  it('llama3 without original_max_position_embeddings falls back to max_position_embeddings (transformers 5)', () => {
    const c = parseModelConfig(llamaConfigJson({
      rope_scaling: undefined,
      rope_parameters: { rope_type: 'llama3', rope_theta: 500000, factor: 8, low_freq_factor: 1, high_freq_factor: 4 },
    }));
    expect(c.rope.originalMaxPositionEmbeddings).toBe(131072);
  });

  it('reads a Qwen3 config: explicit head_dim, tied embeddings, q/k norm, single eos', () => {
    const c = parseModelConfig(qwen3ConfigJson());
    expect(c.family).toBe('qwen3');
    expect(c.headDim).toBe(8);
    expect(c.tieWordEmbeddings).toBe(true);
    expect(c.qkNorm).toBe(true);
    expect(c.mlpBias).toBe(false);
    expect(c.eosTokenIds).toEqual([151645]);
    expect(c.rope).toEqual({ theta: 1000000, type: 'default', partialRotaryFactor: 1 });
  });

  it('a Qwen3 config without head_dim gets 128, as transformers\' Qwen3Config; Llama gets hidden / heads', () => {
    expect(parseModelConfig(qwen3ConfigJson({ head_dim: undefined })).headDim).toBe(128);
    expect(parseModelConfig(llamaConfigJson({ head_dim: undefined })).headDim).toBe(16 / 4);
  });

  it('defaults: tie_word_embeddings false, kv heads = heads, rope_theta 10000', () => {
    const c = parseModelConfig(llamaConfigJson({
      tie_word_embeddings: undefined, num_key_value_heads: undefined, rope_theta: undefined, rope_scaling: undefined,
      eos_token_id: 2, bos_token_id: null,
    }));
    expect(c.tieWordEmbeddings).toBe(false);
    expect(c.numKvHeads).toBe(4);
    expect(c.rope).toEqual({ theta: 10000, type: 'default', partialRotaryFactor: 1 });
    expect(c.eosTokenIds).toEqual([2]);
    expect(c.bosTokenId).toBeNull();
  });

  it('treats Mistral without sliding window as llama, refuses it with one', () => {
    const mistral = llamaConfigJson({ model_type: 'mistral', architectures: ['MistralForCausalLM'], sliding_window: null, rope_scaling: null });
    expect(parseModelConfig(mistral).family).toBe('llama');
    expect(() => parseModelConfig({ ...mistral, sliding_window: 4096 })).toThrow(/sliding-window attention is not supported/);
    // Without the key transformers' MistralConfig uses a 4096-token window: refused too.
    const { sliding_window: _, ...noKey } = mistral;
    expect(() => parseModelConfig(noKey)).toThrow(/sliding-window attention is not supported \(model_type mistral, sliding_window undefined\)/);
    expect(() => parseModelConfig(qwen3ConfigJson({ use_sliding_window: true, sliding_window: 4096 })))
      .toThrow(/sliding-window/);
  });

  it('identifies the family from architectures when model_type is absent', () => {
    expect(parseModelConfig(qwen3ConfigJson({ model_type: undefined })).family).toBe('qwen3');
  });

  const errors: [string, Record<string, unknown>, RegExp][] = [
    ['unknown architecture', llamaConfigJson({ model_type: 'gpt2', architectures: ['GPT2LMHeadModel'] }),
      /config\.json: unsupported model: model_type "gpt2", architectures \["GPT2LMHeadModel"\]; supported: llama/],
    ['a supported type with a non-causal-LM head', llamaConfigJson({ architectures: ['LlamaForSequenceClassification'] }),
      /unsupported model: model_type "llama", architectures \["LlamaForSequenceClassification"\]/],
    ['non-silu activation', llamaConfigJson({ hidden_act: 'gelu' }), /"hidden_act" must be "silu".*got "gelu"/],
    ['heads not divisible by kv heads', llamaConfigJson({ num_key_value_heads: 3 }),
      /"num_key_value_heads" \(3\) must divide num_attention_heads \(4\)/],
    ['hidden not divisible by heads without head_dim', llamaConfigJson({ hidden_size: 18 }),
      /"hidden_size" \(18\) must be divisible by num_attention_heads \(4\)/],
    ['non-integer size', llamaConfigJson({ intermediate_size: 24.5 }), /"intermediate_size" must be a positive integer, got 24.5/],
    ['missing size', llamaConfigJson({ vocab_size: undefined }), /"vocab_size" is required/],
    ['yarn rope', llamaConfigJson({ rope_scaling: { rope_type: 'yarn', factor: 4 } }),
      /"rope_scaling.rope_type" RoPE type "yarn" is not supported/],
    ['dynamic rope', llamaConfigJson({ rope_scaling: { type: 'dynamic', factor: 2 } }), /RoPE type "dynamic" is not supported/],
    ['llama3 rope without its factors', llamaConfigJson({ rope_scaling: { rope_type: 'llama3', factor: 8 } }),
      /"rope_scaling.low_freq_factor" is required/],
  ];
  for (const [what, raw, message] of errors) {
    it(`refuses ${what}`, () => {
      let err: unknown;
      try {
        parseModelConfig(raw);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(CheckpointError);
      expect((err as Error).message).toMatch(message);
      expect((err as Error).message.startsWith('config.json: ')).toBe(true);
    });
  }
});
