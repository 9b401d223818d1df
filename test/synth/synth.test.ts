// mstar synth: the checkpoint opens and plans like a real one, the tokenizer round-trips, the
// adapters pass the server's own adapter reader, and the same seed writes the same bytes.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { openCheckpoint } from '../../lib/checkpoint/checkpoint.js';
import { readModelConfig } from '../../lib/checkpoint/config.js';
import { planWeights } from '../../lib/checkpoint/plan.js';
import type { TensorEntry } from '../../lib/checkpoint/safetensors.js';
import { readAdapter } from '../../lib/lora/adapter.js';
import { fromBf16Bits } from '../../lib/synth/bf16.js';
import { writeSynthCheckpoint } from '../../lib/synth/checkpoint.js';
import { Tokenizer } from '../../lib/tokenizer/tokenizer.js';
import { ADAPTERS, removeTempDirs, synthTiny, tempDir, TINY_CONFIG } from './tiny.js';

function values(e: TensorEntry): Float32Array {
  const bytes = readFileSync(e.file).subarray(e.offset, e.offset + e.nbytes);
  const bits = new Uint16Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
  return Float32Array.from(bits, fromBf16Bits);
}

function std(v: Float32Array): number {
  const mean = v.reduce((a, x) => a + x, 0) / v.length;
  return Math.sqrt(v.reduce((a, x) => a + (x - mean) ** 2, 0) / v.length);
}

describe('mstar synth on a tiny custom config', () => {
  let dir: string;
  beforeAll(async () => {
    dir = (await synthTiny()).dir;
  });
  afterAll(removeTempDirs);

  it('writes a checkpoint the loader plans without complaint', () => {
    const config = readModelConfig(dir);
    expect(config).toMatchObject({ family: 'qwen3', numLayers: 2, hiddenSize: 64, vocabSize: 1000, eosTokenIds: [999], bosTokenId: 997 });
    const ckpt = openCheckpoint(dir);
    const plans = planWeights(config, ckpt);
    expect(plans.map((p) => p.name)).toContain('layers.1.qkv');
    expect(plans.find((p) => p.name === 'lm_head')?.tiedTo).toBe('embed');
    expect(ckpt.get('lm_head.weight')).toBeUndefined();
    expect(ckpt.keys().every((k) => ckpt.get(k)!.dtype === 'BF16')).toBe(true);
  });

  it('fills norms with 1, embeddings with std 0.02 and linears with std 1/sqrt(fan_in)', () => {
    const ckpt = openCheckpoint(dir);
    expect([...values(ckpt.require('model.layers.0.self_attn.q_norm.weight'))]).toEqual(new Array(16).fill(1));
    expect([...new Set(values(ckpt.require('model.norm.weight')))]).toEqual([1]);
    expect(std(values(ckpt.require('model.embed_tokens.weight')))).toBeCloseTo(0.02, 2);
    expect(std(values(ckpt.require('model.layers.1.mlp.down_proj.weight'))) * Math.sqrt(128)).toBeCloseTo(1, 1);
    expect(std(values(ckpt.require('model.layers.0.self_attn.q_proj.weight'))) * Math.sqrt(64)).toBeCloseTo(1, 1);
  });

  it('writes a tokenizer of exactly vocab_size tokens that round-trips text and renders ChatML', () => {
    const tok = Tokenizer.load(dir);
    expect(tok.vocabSize).toBe(1000);
    expect(tok.eosTokenIds).toEqual([999]);
    const text = 'Hello, world! The quick brown fox, ünïcödé 日本語 123\n\tend <|im_end|>';
    const ids = tok.encode(text);
    expect(ids.every((id) => id >= 0 && id < 1000)).toBe(true);
    expect(ids).toContain(999);
    expect(ids.length).toBeLessThan(new TextEncoder().encode(text).length);
    expect(tok.decode(ids, { skipSpecialTokens: false })).toBe(text);
    const prompt = tok.chatTemplate!.render([{ role: 'user', content: 'hi' }], { addGenerationPrompt: true, bosToken: null, eosToken: '<|im_end|>' });
    expect(prompt).toBe('<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n');
  });

  it('writes adapters the server reads, with a non-zero lora_B', () => {
    const config = readModelConfig(dir);
    for (let i = 0; i < ADAPTERS.count; i++) {
      const name = `lora-00${i}`;
      const a = readAdapter(name, join(dir, 'adapters', name), config, { maxRank: 8, targets: new Set(ADAPTERS.targets) });
      expect(a.modules).toHaveLength(2 * 7);
      expect(a.maxRank).toBe(8);
      expect(a.modules[0].scale).toBe(2);
      const down = a.modules.find((m) => m.hf === 'model.layers.1.mlp.down_proj')!;
      expect(down.a.shape).toEqual([8, 128]);
      expect(down.b.shape).toEqual([64, 8]);
      expect(values(down.b).some((x) => x !== 0)).toBe(true);
    }
  });

  it('writes serve.yaml pointing at the checkpoint and adapters', () => {
    const yaml = readFileSync(join(dir, 'serve.yaml'), 'utf8');
    expect(yaml).toMatch(/^model: \.$/m);
    expect(yaml).toMatch(/max_rank: 8/);
    expect(yaml).toMatch(/path: adapters\/lora-002/);
  });

  it('writes the same bytes for the same seed, different ones for another', async () => {
    const again = (await synthTiny(tempDir('synth-again'), 0)).dir;
    const other = (await synthTiny(tempDir('synth-other'), 1)).dir;
    const file = (d: string, f: string): Buffer => readFileSync(join(d, f));
    expect(file(again, 'model.safetensors').equals(file(dir, 'model.safetensors'))).toBe(true);
    expect(file(again, 'adapters/lora-001/adapter_model.safetensors').equals(file(dir, 'adapters/lora-001/adapter_model.safetensors'))).toBe(true);
    expect(file(other, 'model.safetensors').equals(file(dir, 'model.safetensors'))).toBe(false);
  });

  it('shards past the size limit, with an index the loader follows', async () => {
    const sharded = tempDir('synth-shards');
    // Untied: lm_head is stored too. 40 KB shards split the 128 KB embedding and head from the layers.
    const w = await writeSynthCheckpoint(sharded, { ...TINY_CONFIG, tie_word_embeddings: false }, { maxShardBytes: 40_000 });
    expect(w.shards.length).toBeGreaterThan(2);
    expect(w.shards[0]).toBe(`model-00001-of-${String(w.shards.length).padStart(5, '0')}.safetensors`);
    const index = JSON.parse(readFileSync(join(sharded, 'model.safetensors.index.json'), 'utf8'));
    expect(index.metadata.total_size).toBe(w.tensorBytes);
    const config = readModelConfig(sharded);
    const ckpt = openCheckpoint(sharded);
    expect(ckpt.files).toHaveLength(w.shards.length);
    expect(planWeights(config, ckpt).find((p) => p.name === 'lm_head')?.tiedTo).toBeUndefined();
    // Re-synthesizing unsharded into the same folder removes the old shards' index.
    const single = await writeSynthCheckpoint(sharded, TINY_CONFIG);
    expect(single.shards).toEqual(['model.safetensors']);
    expect(openCheckpoint(sharded).files).toHaveLength(1);
  });
});
