// A tiny custom config for synth and bench tests: 2 layers, hidden 64, vocab 1000.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { synthesize, type SynthResult } from '../../lib/synth/synthesize.js';

export const TINY_CONFIG = {
  architectures: ['Qwen3ForCausalLM'],
  model_type: 'qwen3',
  hidden_size: 64,
  intermediate_size: 128,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 16,
  vocab_size: 1000,
  max_position_embeddings: 512,
  rms_norm_eps: 1e-6,
  rope_theta: 1000000,
  tie_word_embeddings: true,
  hidden_act: 'silu',
};

export const ADAPTERS = { count: 3, rank: 8, alpha: 16, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] };

const made: string[] = [];

/** A fresh temporary folder, removed by removeTempDirs(). */
export function tempDir(tag: string): string {
  const dir = mkdtempSync(join(tmpdir(), `mstar-${tag}-`));
  made.push(dir);
  return dir;
}

export function removeTempDirs(): void {
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
}

export function synthTiny(dir = tempDir('synth'), seed = 0): Promise<SynthResult & { dir: string }> {
  return synthesize({ out: dir, config: TINY_CONFIG, name: 'tiny', seed, adapters: ADAPTERS }).then((r) => ({ ...r, dir }));
}
