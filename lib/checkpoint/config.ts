import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { CheckpointError } from './errors.js';

export type ModelFamily = 'llama' | 'qwen3';

/** RoPE as the engine needs it, normalised from either transformers 4 or 5 config style. */
export interface RopeConfig {
  theta: number;
  type: 'default' | 'llama3' | 'linear';
  /** llama3 and linear. */
  factor?: number;
  /** llama3 only. */
  lowFreqFactor?: number;
  highFreqFactor?: number;
  originalMaxPositionEmbeddings?: number;
  /** Fraction of head_dim that is rotated (1 for every supported family so far). */
  partialRotaryFactor: number;
}

export interface ModelConfig {
  family: ModelFamily;
  /** config.json's model_type as written (e.g. 'mistral' for a Mistral served as llama). */
  modelType: string;
  architectures: string[];
  vocabSize: number;
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  rmsNormEps: number;
  maxPositionEmbeddings: number;
  tieWordEmbeddings: boolean;
  attentionBias: boolean;
  mlpBias: boolean;
  /** Per-head RMSNorm on q and k before RoPE (Qwen3). */
  qkNorm: boolean;
  /** torch_dtype (transformers 4) or dtype (transformers 5), e.g. 'bfloat16'; null when absent. */
  torchDtype: string | null;
  bosTokenId: number | null;
  eosTokenIds: number[];
  rope: RopeConfig;
}

const SUPPORTED = 'llama (LlamaForCausalLM), qwen3 (Qwen3ForCausalLM), mistral without sliding window (MistralForCausalLM)';

const FAMILY_OF_MODEL_TYPE: Readonly<Record<string, ModelFamily>> = { llama: 'llama', mistral: 'llama', qwen3: 'qwen3' };
const MODEL_TYPE_OF_ARCH: Readonly<Record<string, string>> = {
  LlamaForCausalLM: 'llama', MistralForCausalLM: 'mistral', Qwen3ForCausalLM: 'qwen3',
};

/** Reads `<dir>/config.json`. */
export function readModelConfig(dir: string): ModelConfig {
  const file = join(dir, 'config.json');
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new CheckpointError(`cannot read config: ${(e as Error).message}`, { file });
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new CheckpointError(`not valid JSON: ${(e as Error).message}`, { file });
  }
  return parseModelConfig(raw, file);
}

/** Validates a parsed HF config.json; `file` is only used in error messages. */
export function parseModelConfig(raw: unknown, file = 'config.json'): ModelConfig {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new CheckpointError('config is not a JSON object', { file });
  }
  const r = new ConfigReader(raw as Record<string, unknown>, file);
  const { family, modelType, architectures } = identify(r);

  if (r.opt('hidden_act', 'silu', 'string') !== 'silu') {
    r.fail('hidden_act', `must be "silu" (the only activation the engine implements), got "${r.raw['hidden_act']}"`);
  }
  refuseSlidingWindow(r, modelType);

  const hiddenSize = r.posInt('hidden_size');
  const numHeads = r.posInt('num_attention_heads');
  const numKvHeads = r.raw['num_key_value_heads'] == null ? numHeads : r.posInt('num_key_value_heads');
  if (numHeads % numKvHeads !== 0) {
    r.fail('num_key_value_heads', `(${numKvHeads}) must divide num_attention_heads (${numHeads})`);
  }
  let headDim: number;
  if (r.raw['head_dim'] != null) {
    headDim = r.posInt('head_dim');
  } else if (family === 'qwen3') {
    headDim = 128;  // Qwen3Config's default: it is not hidden_size / num_attention_heads there
  } else {
    if (hiddenSize % numHeads !== 0) {
      r.fail('hidden_size', `(${hiddenSize}) must be divisible by num_attention_heads (${numHeads}) when head_dim is absent`);
    }
    headDim = hiddenSize / numHeads;
  }
  const maxPositionEmbeddings = r.posInt('max_position_embeddings');

  return {
    family,
    modelType,
    architectures,
    vocabSize: r.posInt('vocab_size'),
    hiddenSize,
    intermediateSize: r.posInt('intermediate_size'),
    numLayers: r.posInt('num_hidden_layers'),
    numHeads,
    numKvHeads,
    headDim,
    rmsNormEps: r.posNumber('rms_norm_eps', 1e-6),
    maxPositionEmbeddings,
    // Every supported config class defaults this to false (PretrainedConfig's own default is true).
    tieWordEmbeddings: r.opt('tie_word_embeddings', false, 'boolean'),
    attentionBias: r.opt('attention_bias', false, 'boolean'),
    // Qwen3's MLP has no bias parameter at all, whatever the config says.
    mlpBias: family === 'llama' ? r.opt('mlp_bias', false, 'boolean') : false,
    qkNorm: family === 'qwen3',
    torchDtype: r.optString('torch_dtype') ?? r.optString('dtype'),
    bosTokenId: r.optTokenId('bos_token_id'),
    eosTokenIds: r.tokenIds('eos_token_id'),
    rope: parseRope(r, headDim, maxPositionEmbeddings),
  };
}

function identify(r: ConfigReader): { family: ModelFamily; modelType: string; architectures: string[] } {
  const archRaw = r.raw['architectures'];
  const architectures = Array.isArray(archRaw) ? archRaw.filter((a): a is string => typeof a === 'string') : [];
  const declared = r.raw['model_type'];
  const modelType = typeof declared === 'string' ? declared : architectures.map((a) => MODEL_TYPE_OF_ARCH[a]).find(Boolean);
  const family = modelType === undefined ? undefined : FAMILY_OF_MODEL_TYPE[modelType];
  const expectedArch = Object.keys(MODEL_TYPE_OF_ARCH).find((a) => MODEL_TYPE_OF_ARCH[a] === modelType);
  // A supported model_type with some other head (e.g. LlamaForSequenceClassification) is not a causal LM.
  if (modelType === undefined || family === undefined ||
      (architectures.length > 0 && expectedArch !== undefined && !architectures.includes(expectedArch))) {
    throw new CheckpointError(
      `unsupported model: model_type ${JSON.stringify(declared ?? null)}, architectures ${JSON.stringify(archRaw ?? null)}; ` +
      `supported: ${SUPPORTED}`, { file: r.file, key: 'model_type' });
  }
  return { family, modelType, architectures };
}

function refuseSlidingWindow(r: ConfigReader, modelType: string): void {
  const window = r.raw['sliding_window'];
  // Qwen3 configs carry a sliding_window size that is only used when use_sliding_window is set;
  // Mistral's is 4096 when the key is absent (transformers' MistralConfig default), so only an
  // explicit null means full attention there.
  const active = modelType === 'qwen3' ? r.raw['use_sliding_window'] === true
    : modelType === 'mistral' ? window !== null
    : window != null;
  const layerTypes = r.raw['layer_types'];
  if (active || (Array.isArray(layerTypes) && layerTypes.some((t) => t !== 'full_attention'))) {
    r.fail('sliding_window', `sliding-window attention is not supported (model_type ${modelType}, sliding_window ${JSON.stringify(window)})`);
  }
}

function parseRope(r: ConfigReader, headDim: number, maxPositionEmbeddings: number): RopeConfig {
  // transformers 4: rope_theta + rope_scaling; transformers 5: rope_parameters holding everything.
  // Like transformers 5, a rope_scaling dict wins over rope_parameters when both are present.
  const scalingKey = isObject(r.raw['rope_scaling']) ? 'rope_scaling' : 'rope_parameters';
  const p = isObject(r.raw[scalingKey]) ? (r.raw[scalingKey] as Record<string, unknown>) : {};
  if (r.raw[scalingKey] != null && !isObject(r.raw[scalingKey])) r.fail(scalingKey, 'must be an object or null');
  const sub = new ConfigReader(p, r.file, `${scalingKey}.`);

  const typeRaw = p['rope_type'] ?? p['type'] ?? 'default';
  const theta = p['rope_theta'] != null ? sub.posNumber('rope_theta') : r.posNumber('rope_theta', 10000);
  const partialRotaryFactor = p['partial_rotary_factor'] != null
    ? sub.posNumber('partial_rotary_factor')
    : r.posNumber('partial_rotary_factor', 1);
  if (partialRotaryFactor > 1) r.fail('partial_rotary_factor', `must be at most 1, got ${partialRotaryFactor}`);
  const rotaryDim = Math.floor(headDim * partialRotaryFactor);
  if (rotaryDim === 0 || rotaryDim % 2 !== 0) {
    r.fail('partial_rotary_factor', `head_dim ${headDim} × ${partialRotaryFactor} gives rotary dim ${rotaryDim}; it must be even and positive`);
  }

  switch (typeRaw) {
    case 'default':
      return { theta, type: 'default', partialRotaryFactor };
    case 'linear':
      return { theta, type: 'linear', factor: sub.posNumber('factor'), partialRotaryFactor };
    case 'llama3': {
      const lowFreqFactor = sub.posNumber('low_freq_factor');
      const highFreqFactor = sub.posNumber('high_freq_factor');
      if (highFreqFactor <= lowFreqFactor) {
        sub.fail('high_freq_factor', `(${highFreqFactor}) must be greater than low_freq_factor (${lowFreqFactor})`);
      }
      // transformers 5 fills a missing original_max_position_embeddings from the top level, then max_position_embeddings.
      const originalMaxPositionEmbeddings = p['original_max_position_embeddings'] != null
        ? sub.posInt('original_max_position_embeddings')
        : r.posInt('original_max_position_embeddings', maxPositionEmbeddings);
      return {
        theta, type: 'llama3', factor: sub.posNumber('factor'), lowFreqFactor, highFreqFactor,
        originalMaxPositionEmbeddings, partialRotaryFactor,
      };
    }
    default:
      return sub.fail('rope_type',
        `RoPE type ${JSON.stringify(typeRaw)} is not supported (supported: default, linear, llama3)`);
  }
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Typed reads of config keys, every failure naming the file and the key. */
class ConfigReader {
  constructor(readonly raw: Record<string, unknown>, readonly file: string, private readonly prefix = '') {}

  fail(key: string, detail: string): never {
    throw new CheckpointError(`"${this.prefix}${key}" ${detail}`, { file: this.file, key: `${this.prefix}${key}` });
  }

  posInt(key: string, fallback?: number): number {
    const v = this.raw[key] ?? fallback;
    if (v === undefined || v === null) this.fail(key, 'is required');
    if (!Number.isSafeInteger(v) || (v as number) <= 0) this.fail(key, `must be a positive integer, got ${JSON.stringify(v)}`);
    return v as number;
  }

  posNumber(key: string, fallback?: number): number {
    const v = this.raw[key] ?? fallback;
    if (v === undefined || v === null) this.fail(key, 'is required');
    if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) this.fail(key, `must be a positive number, got ${JSON.stringify(v)}`);
    return v;
  }

  opt<T extends string | boolean>(key: string, fallback: T, type: 'string' | 'boolean'): T {
    const v = this.raw[key];
    if (v === undefined || v === null) return fallback;
    if (typeof v !== type) this.fail(key, `must be a ${type}, got ${JSON.stringify(v)}`);
    return v as T;
  }

  optString(key: string): string | null {
    const v = this.raw[key];
    if (v === undefined || v === null) return null;
    if (typeof v !== 'string') this.fail(key, `must be a string, got ${JSON.stringify(v)}`);
    return v;
  }

  optTokenId(key: string): number | null {
    const v = this.raw[key];
    if (v === undefined || v === null) return null;
    if (!Number.isSafeInteger(v) || (v as number) < 0) this.fail(key, `must be a token id, got ${JSON.stringify(v)}`);
    return v as number;
  }

  /** A token id or a list of them (generation may stop on any). */
  tokenIds(key: string): number[] {
    const v = this.raw[key];
    if (v === undefined || v === null) return [];
    const ids = Array.isArray(v) ? v : [v];
    if (!ids.every((id) => Number.isSafeInteger(id) && id >= 0)) {
      this.fail(key, `must be a token id or a list of token ids, got ${JSON.stringify(v)}`);
    }
    return ids as number[];
  }
}
