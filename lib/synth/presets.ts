// The config.json of real checkpoints, so `mstar synth --preset NAME` writes tensors with their
// exact names and shapes without downloading them.
//
// Checked (2026-11) against the Hub's config.json as quoted in public code:
// - Qwen/Qwen3-0.6B: a Rust constants file quoting huggingface.co/Qwen/Qwen3-0.6B/raw/main/config.json
//   (hidden 1024, 28 layers, 16/8 heads, head_dim 128, intermediate 3072, max pos 40960, tied).
// - Qwen/Qwen3-4B and Qwen/Qwen3-8B: kohya-ss musubi-tuner's zimage utils embed both config.json
//   files verbatim (4B: 2560, 36 layers, 32/8, 9728, tied; 8B: 4096, 36, 32/8, 12288, untied;
//   both rope_theta 1e6, max pos 40960). Note Qwen3-4B-Instruct-2507 differs (rope_theta 5e6, 262144).
// - meta-llama/Llama-3.2-1B: kevinstephano/thunder_model_blocks hf_llama/llama_config.py, commit
//   4e20de36 of the Hub repo (2048, 16 layers, 32/8, head_dim 64, 8192, vocab 128256, llama3 RoPE).
// - meta-llama/Llama-3.2-3B: citsjtu2020/LLM-Prof sglang/Model_Config.md (3072, 28 layers, 24/8,
//   head_dim 128, 8192, tied, same llama3 RoPE).

export type RawConfig = Record<string, unknown>;

const QWEN3_COMMON = {
  architectures: ['Qwen3ForCausalLM'],
  attention_bias: false,
  attention_dropout: 0.0,
  bos_token_id: 151643,
  eos_token_id: 151645,
  head_dim: 128,
  hidden_act: 'silu',
  initializer_range: 0.02,
  max_position_embeddings: 40960,
  model_type: 'qwen3',
  rms_norm_eps: 1e-6,
  rope_scaling: null,
  rope_theta: 1000000,
  sliding_window: null,
  torch_dtype: 'bfloat16',
  transformers_version: '4.51.0',
  use_cache: true,
  use_sliding_window: false,
  vocab_size: 151936,
};

const LLAMA32_COMMON = {
  architectures: ['LlamaForCausalLM'],
  attention_bias: false,
  attention_dropout: 0.0,
  bos_token_id: 128000,
  eos_token_id: 128001,
  hidden_act: 'silu',
  initializer_range: 0.02,
  intermediate_size: 8192,
  max_position_embeddings: 131072,
  mlp_bias: false,
  model_type: 'llama',
  num_key_value_heads: 8,
  pretraining_tp: 1,
  rms_norm_eps: 1e-5,
  rope_scaling: {
    factor: 32.0,
    high_freq_factor: 4.0,
    low_freq_factor: 1.0,
    original_max_position_embeddings: 8192,
    rope_type: 'llama3',
  },
  rope_theta: 500000.0,
  tie_word_embeddings: true,
  torch_dtype: 'bfloat16',
  transformers_version: '4.45.0.dev0',
  use_cache: true,
  vocab_size: 128256,
};

export const PRESETS: Readonly<Record<string, RawConfig>> = {
  'qwen3-0.6b': {
    ...QWEN3_COMMON, hidden_size: 1024, intermediate_size: 3072, max_window_layers: 28,
    num_attention_heads: 16, num_hidden_layers: 28, num_key_value_heads: 8, tie_word_embeddings: true,
  },
  'qwen3-4b': {
    ...QWEN3_COMMON, hidden_size: 2560, intermediate_size: 9728, max_window_layers: 36,
    num_attention_heads: 32, num_hidden_layers: 36, num_key_value_heads: 8, tie_word_embeddings: true,
  },
  'qwen3-8b': {
    ...QWEN3_COMMON, hidden_size: 4096, intermediate_size: 12288, max_window_layers: 36,
    num_attention_heads: 32, num_hidden_layers: 36, num_key_value_heads: 8, tie_word_embeddings: false,
  },
  'llama-3.2-1b': {
    ...LLAMA32_COMMON, head_dim: 64, hidden_size: 2048, num_attention_heads: 32, num_hidden_layers: 16,
  },
  'llama-3.2-3b': {
    ...LLAMA32_COMMON, head_dim: 128, hidden_size: 3072, num_attention_heads: 24, num_hidden_layers: 28,
  },
};

export const PRESET_NAMES = Object.keys(PRESETS);

/** A deep copy, so callers may edit it (e.g. --layers). */
export function presetConfig(name: string): RawConfig | undefined {
  const preset = Object.hasOwn(PRESETS, name) ? PRESETS[name] : undefined;
  return preset === undefined ? undefined : structuredClone(preset);
}
