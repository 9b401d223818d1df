import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

import { describe, expect, it } from 'vitest';

import { engineOptionsOf } from '../../lib/config/engine_options.js';
import { ConfigError, loadServeConfig, type ServeOverrides } from '../../lib/config/load.js';

function yamlFile(text: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'mstar-config-'));
  const file = join(dir, 'serve.yaml');
  writeFileSync(file, text);
  return file;
}

function errorOf(file: string | undefined, overrides: ServeOverrides = {}): string {
  try {
    loadServeConfig(file, overrides);
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return (e as Error).message;
  }
  throw new Error('expected a ConfigError');
}

describe('loadServeConfig', () => {
  it('fills every default', () => {
    const file = yamlFile('model: /models/qwen3\n');
    expect(loadServeConfig(file)).toEqual({
      model: '/models/qwen3',
      served_model_name: '/models/qwen3',
      device: 'auto',
      max_batch_size: 64,
      kv_cache: { block_size: 16 },
      prefix_cache: true,
      server: { host: '127.0.0.1', port: 8000 },
      resources: {},
    });
  });

  it('turns LoRA on with resources.lora, resolving adapter paths against the file', () => {
    const file = yamlFile('model: /m\nresources:\n  lora:\n    slots: 2\n    adapters: [{ name: a, path: adapters/a }]\n');
    const lora = loadServeConfig(file).resources.lora!;
    expect(lora).toMatchObject({ slots: 2, max_rank: 16, host_cache: 32, slice_steps: 16, runtime_updates: false });
    expect(lora.targets).toBeUndefined();  // the pool's: lora/pool_targets.ts
    expect(lora.adapters).toEqual([{ name: 'a', path: join(dirname(file), 'adapters/a') }]);
  });

  it('--lora-modules adds adapters and turns LoRA on', () => {
    const file = yamlFile('model: /m\n');
    const lora = loadServeConfig(file, { lora_modules: [{ name: 'x', path: '/ad/x' }] }).resources.lora!;
    expect(lora.adapters).toEqual([{ name: 'x', path: '/ad/x' }]);
    expect(lora.slots).toBe(4);
  });

  it('names a bad LoRA key', () => {
    expect(errorOf(yamlFile('model: /m\nresources: { lora: { slots: 0, targets: [qkv] } }\n'))).toMatch(/resources\.lora\.slots/);
  });

  it('reads every key', () => {
    const file = yamlFile(`
model: /m
served_model_name: qwen
device: cuda
dtype: bf16
max_seq_len: 4096
max_batch_size: 8
max_num_batched_tokens: 512
kv_cache: { block_size: 32, memory_fraction: 0.5 }
prefix_cache: false
server: { host: 0.0.0.0, port: 9000, max_body_bytes: 1000000 }
`);
    const config = loadServeConfig(file);
    expect(config).toMatchObject({ served_model_name: 'qwen', device: 'cuda', dtype: 'bf16', max_seq_len: 4096, prefix_cache: false });
    expect(engineOptionsOf(config)).toEqual({
      model: '/m', device: 'cuda', dtype: 'bf16', maxModelLen: 4096, maxBatchSize: 8, maxNumBatchedTokens: 512,
      kvCache: { blockSize: 32, memoryFraction: 0.5 }, prefixCache: false, onProgress: undefined,
    });
  });

  it('resolves a relative model against the YAML file, and a flag against the working directory', () => {
    const file = yamlFile('model: ./ckpt\n');
    expect(loadServeConfig(file).model).toBe(join(file, '..', 'ckpt'));
    expect(loadServeConfig(file).served_model_name).toBe('./ckpt');
    expect(loadServeConfig(file, { model: 'other' }).model).toBe(join(process.cwd(), 'other'));
  });

  it('lets flags override the file', () => {
    const file = yamlFile('model: /m\ndevice: cpu\nserver: { port: 9000 }\n');
    const config = loadServeConfig(file, { device: 'cuda', port: 1234, host: '::1' });
    expect(config.device).toBe('cuda');
    expect(config.server).toEqual({ host: '::1', port: 1234 });
  });

  it('works without a file when --model is given', () => {
    expect(loadServeConfig(undefined, { model: '/m' }).model).toBe('/m');
  });

  it('names the key and the expectation', () => {
    const file = yamlFile('model: /m\nkv_cache:\n  block_size: big\n');
    expect(errorOf(file)).toBe(`${file}: kv_cache.block_size must be an integer >= 1, got "big"`);
  });

  it('names every choice of a key that takes a number or a word', () => {
    for (const bad of ['0', 'sometimes']) {
      const file = yamlFile(`model: /m\nresources:\n  lora: { adapters: [], merge_after_steps: ${bad} }\n`);
      const got = bad === '0' ? 0 : `"${bad}"`;
      expect(errorOf(file)).toBe(`${file}: resources.lora.merge_after_steps must be an integer >= 1 or "auto", got ${got}`);
    }
    for (const good of ['16', 'auto']) {
      const file = yamlFile(`model: /m\nresources:\n  lora: { adapters: [], merge_after_steps: ${good} }\n`);
      expect(loadServeConfig(file).resources.lora!.merge_after_steps).toBe(good === 'auto' ? 'auto' : 16);
    }
  });

  it('reports each problem on its own line', () => {
    const file = yamlFile('model: /m\ndevice: gpu\nmax_batch_size: 0\nkv_cache: { memory_fraction: 1.5 }\nprefix_cache: yes please\n');
    expect(errorOf(file).split('\n')).toEqual([
      `${file}: device must be one of "auto", "cpu", "cuda", got "gpu"`,
      `${file}: max_batch_size must be an integer >= 1, got 0`,
      `${file}: kv_cache.memory_fraction must be a number > 0 and <= 1, got 1.5`,
      `${file}: prefix_cache must be true or false, got "yes please"`,
    ]);
  });

  it('rejects unknown keys, nested ones too', () => {
    const file = yamlFile('model: /m\nmax_tokens: 5\nserver: { prot: 1 }\n');
    const lines = errorOf(file).split('\n');
    expect(lines[0]).toBe(`${file}: unknown key max_tokens (expected one of: model, served_model_name, device, dtype, max_seq_len, max_batch_size, max_num_batched_tokens, kv_cache, prefix_cache, server, resources)`);
    expect(lines[1]).toBe(`${file}: unknown key server.prot (expected one of: host, port, max_body_bytes)`);
  });

  it('requires a model', () => {
    expect(errorOf(yamlFile('device: cpu\n'))).toMatch(/: model is required: set `model: <checkpoint folder>` in serve.yaml or pass --model DIR$/);
    expect(errorOf(undefined)).toMatch(/^mstar serve: model is required/);
  });

  it('blames the flag for a bad flag value', () => {
    expect(errorOf(undefined, { model: '/m', port: 'http' })).toBe('--port: server.port must be an integer >= 0 and <= 65535, got "http"');
    expect(errorOf(undefined, { model: '/m', device: 'tpu' })).toBe('--device: device must be one of "auto", "cpu", "cuda", got "tpu"');
  });

  it('explains files that are not YAML mappings', () => {
    expect(errorOf(yamlFile('model: [unclosed\n'))).toMatch(/invalid YAML/);
    expect(errorOf(yamlFile('- a\n- b\n'))).toMatch(/must be a mapping of settings \(key: value\), got a list/);
    expect(errorOf(yamlFile('model: /a\nmodel: /b\n'))).toMatch(/invalid YAML: .*unique/i);
    expect(errorOf('/no/such/serve.yaml')).toBe('/no/such/serve.yaml: cannot read: ENOENT');
  });

  it('refuses settings that contradict each other, naming the file', () => {
    const file = yamlFile('model: /m\nkv_cache: { num_blocks: 8, memory_fraction: 0.5 }\n');
    expect(errorOf(file)).toBe(`${file}: kv_cache: give num_blocks or memory_fraction, not both`);
    const twice = yamlFile('model: /m\nresources:\n  lora:\n    adapters: [{ name: a, path: x }, { name: a, path: y }]\n');
    expect(errorOf(twice)).toBe(`${twice}: resources.lora.adapters: a is named twice`);
    const shadowed = yamlFile('model: /m\nserved_model_name: base\nresources:\n  lora:\n    adapters: [{ name: base, path: x }]\n');
    expect(errorOf(shadowed)).toMatch(/resources\.lora\.adapters: base is the served model's name/);
  });

  it('keeps a bad section an error when a flag sets a key inside it', () => {
    const file = yamlFile('model: /m\nserver: 8080\n');
    expect(errorOf(file, { port: 9000 })).toBe(`${file}: server must be a mapping, got 8080`);
  });

  it('takes an empty file as all defaults', () => {
    expect(loadServeConfig(yamlFile(''), { model: '/m' }).device).toBe('auto');
  });
});
