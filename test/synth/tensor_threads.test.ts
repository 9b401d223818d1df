// Synthetic tensors drawn on worker threads: the bytes are those the streaming safetensors
// writer gives for the same tensors and seed, whatever the thread count; a failure names the
// file and tensor and leaves no shard behind.
import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { parseModelConfig } from '../../lib/checkpoint/config.js';
import { writeSafetensors } from '../../lib/checkpoint/safetensors_writer.js';
import { bf16Chunks } from '../../lib/synth/bf16_chunks.js';
import { writeSynthCheckpoint } from '../../lib/synth/checkpoint.js';
import { checkpointTensors } from '../../lib/synth/checkpoint_tensors.js';
import { hashString, Rng } from '../../lib/synth/rng.js';
import { runTensorJobs } from '../../lib/synth/tensor_threads.js';
import { removeTempDirs, tempDir, TINY_CONFIG } from './tiny.js';

afterAll(removeTempDirs);

describe('synthetic tensors on worker threads', () => {
  it('writes the bytes the streaming writer writes, with 1 thread or 3, across shards', async () => {
    const seed = 7;
    const dirs = [tempDir('threads-1'), tempDir('threads-3')];
    const one = await writeSynthCheckpoint(dirs[0], TINY_CONFIG, { seed, threads: 1 });
    await writeSynthCheckpoint(dirs[1], TINY_CONFIG, { seed, threads: 3 });
    // The reference: every tensor streamed in order through writeSafetensors.
    const ref = join(tempDir('threads-ref'), 'model.safetensors');
    const tensors = checkpointTensors(parseModelConfig(one.rawConfig, 'config.json'));
    await writeSafetensors(ref, tensors.map((t) => ({
      name: t.name, dtype: 'BF16' as const, shape: t.shape,
      data: bf16Chunks(t.shape.reduce((a, d) => a * d, 1), t.init, new Rng(seed, hashString(t.name))),
    })), { format: 'pt' });
    for (const dir of dirs) expect(readFileSync(join(dir, 'model.safetensors')).equals(readFileSync(ref))).toBe(true);

    const sharded = [tempDir('shards-1'), tempDir('shards-4')];
    const untied = { ...TINY_CONFIG, tie_word_embeddings: false };
    const w = await writeSynthCheckpoint(sharded[0], untied, { seed, threads: 1, maxShardBytes: 40_000 });
    await writeSynthCheckpoint(sharded[1], untied, { seed, threads: 4, maxShardBytes: 40_000 });
    expect(w.shards.length).toBeGreaterThan(2);
    for (const f of w.shards) expect(readFileSync(join(sharded[1], f)).equals(readFileSync(join(sharded[0], f)))).toBe(true);
  });

  it('a job that cannot be written fails the run, naming its file and tensor; a checkpoint that fails leaves no shard', async () => {
    const dir = tempDir('threads-fail');
    const job = { offset: 0, elements: 1 << 20, init: { kind: 'normal', std: 1 } as const, seed: 0 };
    await expect(runTensorJobs([
      { ...job, file: join(dir, 'absent.bin'), name: 'missing' },
      { ...job, file: join(dir, 'absent-too.bin'), name: 'other' },
    ], () => {}, 2)).rejects.toThrow(/absent(-too)?\.bin, tensor (missing|other): ENOENT/);
    await expect(runTensorJobs([{ ...job, file: join(dir, 'x.bin'), name: 'x' }], () => {}, 0)).rejects.toThrow(/positive integer, got 0/);
    // The second shard's temporary name is taken (by a folder): the first shard, sized and
    // begun, is removed, and no shard appears.
    const shards = { ...TINY_CONFIG, tie_word_embeddings: false };
    const plan = await writeSynthCheckpoint(tempDir('threads-plan'), shards, { maxShardBytes: 40_000 });
    const blocker = `${plan.shards[1]}.partial-${process.pid}`;
    mkdirSync(join(dir, blocker));
    await expect(writeSynthCheckpoint(dir, shards, { maxShardBytes: 40_000 })).rejects.toThrow(/EISDIR/);
    expect(readdirSync(dir).filter((f) => f.includes('safetensors')).sort()).toEqual([blocker]);
  });
});
