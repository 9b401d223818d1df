import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';
import type { SafetensorsDtype } from '../../lib/checkpoint/dtype.js';
import { writeSafetensors, type TensorToWrite } from '../../lib/checkpoint/safetensors_writer.js';

const made: string[] = [];
afterAll(() => {
  for (const d of made) rmSync(d, { recursive: true, force: true });
});

/** A fresh folder under the OS temp dir, removed after the test file. */
export function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'mstar-ckpt-'));
  made.push(d);
  return d;
}

/** A hand-made safetensors file: any header text (valid or not) followed by `dataBytes` zero bytes. */
export function writeRaw(path: string, header: string | object, dataBytes: number, lengthField?: bigint): void {
  const json = Buffer.from(typeof header === 'string' ? header : JSON.stringify(header), 'utf8');
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(lengthField ?? BigInt(json.length));
  writeFileSync(path, Buffer.concat([len, json, Buffer.alloc(dataBytes)]));
}

export interface Spec {
  name: string;
  shape: number[];
  dtype?: SafetensorsDtype;
}

const ITEM: Record<string, number> = { BF16: 2, F16: 2, F32: 4 };

/** Writes zero-filled tensors (dtype BF16 unless given). */
export async function writeTensors(path: string, specs: Spec[]): Promise<void> {
  const tensors: TensorToWrite[] = specs.map((s) => {
    const dtype = s.dtype ?? 'BF16';
    return { name: s.name, dtype, shape: s.shape, data: new Uint8Array(s.shape.reduce((a, d) => a * d, 1) * (ITEM[dtype] ?? 1)) };
  });
  await writeSafetensors(path, tensors);
}

export interface TinyModel {
  vocab: number;
  hidden: number;
  inter: number;
  layers: number;
  qOut: number;
  kvOut: number;
  headDim: number;
  qkNorm?: boolean;
  attentionBias?: boolean;
  lmHead?: boolean;
}

/** HF tensor names and shapes of a Llama/Qwen3 checkpoint, spelled out independently of the rules. */
export function hfTensors(m: TinyModel): Spec[] {
  const out: Spec[] = [{ name: 'model.embed_tokens.weight', shape: [m.vocab, m.hidden] }];
  for (let i = 0; i < m.layers; i++) {
    const p = `model.layers.${i}.`;
    out.push(
      { name: `${p}input_layernorm.weight`, shape: [m.hidden] },
      { name: `${p}self_attn.q_proj.weight`, shape: [m.qOut, m.hidden] },
      { name: `${p}self_attn.k_proj.weight`, shape: [m.kvOut, m.hidden] },
      { name: `${p}self_attn.v_proj.weight`, shape: [m.kvOut, m.hidden] },
      { name: `${p}self_attn.o_proj.weight`, shape: [m.hidden, m.qOut] },
      { name: `${p}post_attention_layernorm.weight`, shape: [m.hidden] },
      { name: `${p}mlp.gate_proj.weight`, shape: [m.inter, m.hidden] },
      { name: `${p}mlp.up_proj.weight`, shape: [m.inter, m.hidden] },
      { name: `${p}mlp.down_proj.weight`, shape: [m.hidden, m.inter] },
    );
    if (m.qkNorm) {
      out.push(
        { name: `${p}self_attn.q_norm.weight`, shape: [m.headDim] },
        { name: `${p}self_attn.k_norm.weight`, shape: [m.headDim] },
      );
    }
    if (m.attentionBias) {
      out.push(
        { name: `${p}self_attn.q_proj.bias`, shape: [m.qOut] },
        { name: `${p}self_attn.k_proj.bias`, shape: [m.kvOut] },
        { name: `${p}self_attn.v_proj.bias`, shape: [m.kvOut] },
        { name: `${p}self_attn.o_proj.bias`, shape: [m.hidden] },
      );
    }
  }
  out.push({ name: 'model.norm.weight', shape: [m.hidden] });
  if (m.lmHead !== false) out.push({ name: 'lm_head.weight', shape: [m.vocab, m.hidden] });
  return out;
}

/** A Llama 3.1-style config.json (transformers 4 layout) for a tiny GQA model. */
export function llamaConfigJson(over: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    architectures: ['LlamaForCausalLM'],
    model_type: 'llama',
    vocab_size: 32,
    hidden_size: 16,
    intermediate_size: 24,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    hidden_act: 'silu',
    max_position_embeddings: 131072,
    rms_norm_eps: 1e-5,
    rope_theta: 500000.0,
    rope_scaling: {
      factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0,
      original_max_position_embeddings: 8192, rope_type: 'llama3',
    },
    tie_word_embeddings: false,
    attention_bias: false,
    mlp_bias: false,
    torch_dtype: 'bfloat16',
    bos_token_id: 1,
    eos_token_id: [2, 3],
    ...over,
  };
}

/** A Qwen3-style config.json: head_dim 8 although hidden/heads = 4, tied embeddings. */
export function qwen3ConfigJson(over: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    architectures: ['Qwen3ForCausalLM'],
    model_type: 'qwen3',
    vocab_size: 32,
    hidden_size: 16,
    intermediate_size: 24,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    head_dim: 8,
    hidden_act: 'silu',
    max_position_embeddings: 40960,
    rms_norm_eps: 1e-6,
    rope_theta: 1000000,
    rope_scaling: null,
    sliding_window: null,
    use_sliding_window: false,
    max_window_layers: 28,
    tie_word_embeddings: true,
    attention_bias: false,
    torch_dtype: 'bfloat16',
    bos_token_id: 151643,
    eos_token_id: 151645,
    ...over,
  };
}
