import { ALL_TARGETS } from '../lora/targets.js';

// The one schema of serve.yaml: its keys, types, limits and defaults. The loader validates
// with it, fills defaults from it, and words its errors from it.

export type Device = 'auto' | 'cpu' | 'cuda';
export type Dtype = 'bf16' | 'f16' | 'f32';

/** serve.yaml after validation and defaults, with `model` resolved to an absolute path. */
export interface ServeConfig {
  /** Checkpoint folder (absolute). */
  model: string;
  /** The name clients put in `model`; defaults to `model` as written. */
  served_model_name: string;
  device: Device;
  dtype?: Dtype;
  /** Longest prompt + output; absent means the model's max_position_embeddings. */
  max_seq_len?: number;
  max_batch_size: number;
  /** Absent: 8192 on a CUDA device of 70 GiB or more, else 2048 (as vLLM's OpenAI server). */
  max_num_batched_tokens?: number;
  kv_cache: { block_size: number; num_blocks?: number; memory_fraction?: number };
  prefix_cache: boolean;
  server: { host: string; port: number; max_body_bytes?: number };
  /** Optional engine resources; `lora` turns per-request adapters on. */
  resources: { lora?: LoraConfig };
}

export interface LoraConfig {
  /** Adapters resident at once (GPU slots), besides the zero adapter. */
  slots: number;
  max_rank: number;
  /** Adapters kept read in host memory. */
  host_cache: number;
  /** Engine steps an adapter keeps a slot others wait for before it hands it over. */
  slice_steps: number;
  /** Steps one adapter runs alone before it is merged into the weights, or 'auto' (measured). */
  merge_after_steps?: number | 'auto';
  /**
   * HF module names adapters may target. Absent: those the listed adapters target, where
   * runtime_updates is off; else every target (lora/pool_targets.ts).
   */
  targets?: string[];
  /** Loaded at start; relative paths resolve against the YAML file's folder. */
  adapters: { name: string; path: string }[];
  /** Enables POST /v1/load_lora_adapter and /v1/unload_lora_adapter. */
  runtime_updates: boolean;
}

export const serveConfigSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['model'],
  properties: {
    model: { type: 'string', minLength: 1 },
    served_model_name: { type: 'string', minLength: 1 },
    device: { type: 'string', enum: ['auto', 'cpu', 'cuda'], default: 'auto' },
    dtype: { type: 'string', enum: ['bf16', 'f16', 'f32'] },
    max_seq_len: { type: 'integer', minimum: 1 },
    max_batch_size: { type: 'integer', minimum: 1, default: 64 },
    max_num_batched_tokens: { type: 'integer', minimum: 1 },
    kv_cache: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: {
        block_size: { type: 'integer', minimum: 1, default: 16 },
        num_blocks: { type: 'integer', minimum: 1 },
        memory_fraction: { type: 'number', exclusiveMinimum: 0, maximum: 1 },
      },
    },
    prefix_cache: { type: 'boolean', default: true },
    server: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: {
        host: { type: 'string', minLength: 1, default: '127.0.0.1' },
        port: { type: 'integer', minimum: 0, maximum: 65535, default: 8000 },
        max_body_bytes: { type: 'integer', minimum: 1 },
      },
    },
    resources: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: {
        lora: {
          type: 'object',
          additionalProperties: false,
          properties: {
            slots: { type: 'integer', minimum: 1, default: 4 },
            max_rank: { type: 'integer', minimum: 1, maximum: 512, default: 16 },
            host_cache: { type: 'integer', minimum: 1, default: 32 },
            slice_steps: { type: 'integer', minimum: 1, default: 16 },
            merge_after_steps: { anyOf: [{ type: 'integer', minimum: 1 }, { const: 'auto' }] },
            targets: {
              type: 'array', minItems: 1, uniqueItems: true,
              items: { type: 'string', enum: ALL_TARGETS },
            },
            adapters: {
              type: 'array',
              default: [],
              items: {
                type: 'object', additionalProperties: false, required: ['name', 'path'],
                properties: { name: { type: 'string', minLength: 1 }, path: { type: 'string', minLength: 1 } },
              },
            },
            runtime_updates: { type: 'boolean', default: false },
          },
        },
      },
    },
  },
} as const;
