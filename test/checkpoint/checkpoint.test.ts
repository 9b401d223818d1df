import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { openCheckpoint } from '../../lib/checkpoint/checkpoint.js';
import { CheckpointError } from '../../lib/checkpoint/errors.js';
import { tempDir, writeTensors } from './helpers.js';

function index(dir: string, weightMap: Record<string, string>): void {
  writeFileSync(join(dir, 'model.safetensors.index.json'), JSON.stringify({ metadata: { total_size: 0 }, weight_map: weightMap }));
}

function thrown(fn: () => unknown): CheckpointError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(CheckpointError);
    return e as CheckpointError;
  }
  throw new Error('expected a CheckpointError');
}

describe('openCheckpoint', () => {
  it('opens a single model.safetensors', async () => {
    const dir = tempDir();
    await writeTensors(join(dir, 'model.safetensors'), [{ name: 'a', shape: [2, 3] }, { name: 'b', shape: [4] }]);
    const ck = openCheckpoint(dir);
    expect(ck.dir).toBe(dir);
    expect(ck.files.map((f) => f.path)).toEqual([join(dir, 'model.safetensors')]);
    expect(ck.keys().sort()).toEqual(['a', 'b']);
    expect(ck.get('a')!.shape).toEqual([2, 3]);
    expect(ck.get('zzz')).toBeUndefined();
    expect(ck.require('b', [4]).key).toBe('b');
  });

  it('reads model.safetensors before an index beside it, as transformers does', async () => {
    const dir = tempDir();
    await writeTensors(join(dir, 'model.safetensors'), [{ name: 'a', shape: [2] }]);
    index(dir, { a: 'model-00001-of-00002.safetensors' });  // a leftover index whose shard is gone
    const ck = openCheckpoint(dir);
    expect(ck.files.map((f) => f.path)).toEqual([join(dir, 'model.safetensors')]);
  });

  it('opens a sharded checkpoint through its index', async () => {
    const dir = tempDir();
    await writeTensors(join(dir, 'model-00001-of-00002.safetensors'), [{ name: 'a', shape: [2] }, { name: 'b', shape: [2] }]);
    await writeTensors(join(dir, 'model-00002-of-00002.safetensors'), [{ name: 'c', shape: [3] }]);
    index(dir, { a: 'model-00001-of-00002.safetensors', b: 'model-00001-of-00002.safetensors', c: 'model-00002-of-00002.safetensors' });
    const ck = openCheckpoint(dir);
    expect(ck.files).toHaveLength(2);
    expect(ck.get('c')!.file).toBe(join(dir, 'model-00002-of-00002.safetensors'));
    expect(ck.get('a')!.file).toBe(join(dir, 'model-00001-of-00002.safetensors'));
    expect(ck.keys().sort()).toEqual(['a', 'b', 'c']);
  });

  it('a shard listed in the index but missing on disk names the shard and a key', async () => {
    const dir = tempDir();
    await writeTensors(join(dir, 's1.safetensors'), [{ name: 'a', shape: [2] }]);
    index(dir, { a: 's1.safetensors', 'model.layers.7.mlp.down_proj.weight': 's2.safetensors' });
    const e = thrown(() => openCheckpoint(dir));
    expect(e.message).toContain('shard "s2.safetensors"');
    expect(e.message).toContain('model.layers.7.mlp.down_proj.weight');
    expect(e.file).toBe(join(dir, 'model.safetensors.index.json'));
  });

  it('a key mapped to a shard that lacks it names both', async () => {
    const dir = tempDir();
    await writeTensors(join(dir, 's1.safetensors'), [{ name: 'a', shape: [2] }]);
    index(dir, { a: 's1.safetensors', b: 's1.safetensors' });
    const e = thrown(() => openCheckpoint(dir));
    expect(e.message).toMatch(/maps tensor "b" to "s1.safetensors", but that shard has no such tensor/);
    expect(e.file).toBe(join(dir, 's1.safetensors'));
    expect(e.key).toBe('b');
  });

  it('a key stored in one shard but mapped to another is an error', async () => {
    const dir = tempDir();
    await writeTensors(join(dir, 's1.safetensors'), [{ name: 'a', shape: [2] }, { name: 'b', shape: [2] }]);
    await writeTensors(join(dir, 's2.safetensors'), [{ name: 'b', shape: [2] }]);
    index(dir, { a: 's1.safetensors', b: 's2.safetensors' });
    expect(() => openCheckpoint(dir)).toThrow(/tensor "b" is in shard "s1.safetensors" but the index maps it to "s2.safetensors"/);
  });

  it('refuses a weight_map pointing outside the folder', async () => {
    const dir = tempDir();
    index(dir, { a: '../elsewhere.safetensors' });
    expect(() => openCheckpoint(dir)).toThrow(/must be a shard file name inside the folder/);
  });

  it('refuses pickled checkpoints with a pointer to safetensors', () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'pytorch_model.bin'), 'PK');
    const e = thrown(() => openCheckpoint(dir));
    expect(e.message).toMatch(/pickled PyTorch checkpoints are not supported/);
    expect(e.message).toMatch(/convert the model to safetensors/);
    expect(e.file).toBe(join(dir, 'pytorch_model.bin'));
  });

  it('says what it looked for in an empty folder', () => {
    const dir = tempDir();
    expect(() => openCheckpoint(dir)).toThrow(/no model.safetensors or model.safetensors.index.json/);
    expect(() => openCheckpoint(join(dir, 'missing'))).toThrow(/does not exist/);
  });

  it('require: missing key states the expected shape; wrong shape states both', async () => {
    const dir = tempDir();
    await writeTensors(join(dir, 'model.safetensors'), [{ name: 'model.norm.weight', shape: [8] }]);
    const ck = openCheckpoint(dir);
    const missing = thrown(() => ck.require('lm_head.weight', [32, 16], '(vocab_size=32, hidden_size=16)'));
    expect(missing.message).toBe(
      `${join(dir, 'model.safetensors')}: tensor "lm_head.weight" is missing from the checkpoint (expected shape [32, 16] (vocab_size=32, hidden_size=16))`);
    expect(missing.key).toBe('lm_head.weight');
    const wrong = thrown(() => ck.require('model.norm.weight', [16], '(hidden_size=16)'));
    expect(wrong.message).toBe(
      `${join(dir, 'model.safetensors')}: tensor "model.norm.weight" has shape [8], expected [16] (hidden_size=16)`);
  });
});
