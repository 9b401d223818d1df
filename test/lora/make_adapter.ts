// Writes small random PEFT LoRA adapters for tests, and merges them into plain weights.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { writeSafetensors, type TensorToWrite } from '../../lib/checkpoint/safetensors_writer.js';

export interface ModuleSpec {
  /** HF module path, e.g. 'model.layers.0.self_attn.q_proj'. */
  path: string;
  rank: number;
  in: number;
  out: number;
  embedding?: boolean;
}

export interface RandomModule extends ModuleSpec {
  a: Float32Array;  // [rank, in]
  b: Float32Array;  // [out, rank]
}

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32 - 0.5;
  };
}

/** `edit`: changes the random values before they are written (a bad value for a test). */
export async function writeAdapter(
  modules: ModuleSpec[], config: Record<string, unknown>, seed = 7, extra: TensorToWrite[] = [],
  edit?: (made: RandomModule[]) => void,
): Promise<{ dir: string; modules: RandomModule[] }> {
  const dir = mkdtempSync(join(tmpdir(), 'mstar-lora-'));
  const r = rng(seed);
  const made = modules.map((m) => ({
    ...m,
    a: Float32Array.from({ length: m.rank * m.in }, () => r() * 0.6),
    b: Float32Array.from({ length: m.out * m.rank }, () => r() * 0.6),
  }));
  edit?.(made);
  const tensors: TensorToWrite[] = made.flatMap((m) => {
    const [an, bn] = m.embedding ? ['lora_embedding_A', 'lora_embedding_B'] : ['lora_A.weight', 'lora_B.weight'];
    return [
      { name: `base_model.model.${m.path}.${an}`, dtype: 'F32' as const, shape: [m.rank, m.in], data: new Uint8Array(m.a.buffer) },
      { name: `base_model.model.${m.path}.${bn}`, dtype: 'F32' as const, shape: [m.out, m.rank], data: new Uint8Array(m.b.buffer) },
    ];
  });
  await writeSafetensors(join(dir, 'adapter_model.safetensors'), [...tensors, ...extra]);
  writeFileSync(join(dir, 'adapter_config.json'), JSON.stringify({ peft_type: 'LORA', bias: 'none', ...config }));
  return { dir, modules: made };
}

/** delta[out, in] = scale * B · A (for an embedding: [vocab, dim] = scale * (B · A)ᵀ). */
export function delta(m: RandomModule, scale: number): Float64Array {
  const d = new Float64Array(m.out * m.in);
  for (let o = 0; o < m.out; o++)
    for (let i = 0; i < m.in; i++) {
      let acc = 0;
      for (let k = 0; k < m.rank; k++) acc += m.b[o * m.rank + k] * m.a[k * m.in + i];
      d[o * m.in + i] = scale * acc;
    }
  if (!m.embedding) return d;
  const t = new Float64Array(m.in * m.out);
  for (let o = 0; o < m.out; o++) for (let i = 0; i < m.in; i++) t[i * m.out + o] = d[o * m.in + i];
  return t;
}
