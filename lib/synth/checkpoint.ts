// Writes a random-weight checkpoint folder: config.json, the safetensors shards (+ index when
// more than one), generation_config.json and a tokenizer. Each shard is sized with its header
// written, then its tensors are drawn and written in place on worker threads (tensor_threads.ts),
// 1 MiB at a time, so writing an 8B model costs a few MiB of memory a thread. A shard appears
// under its name only once complete.
import { mkdir, readdir, rename, rm, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

import { INDEX_FILE } from '../checkpoint/checkpoint.js';
import { parseModelConfig, type ModelConfig } from '../checkpoint/config.js';
import { encodeSafetensorsHeader } from '../checkpoint/safetensors_writer.js';
import { bf16Bytes, checkpointTensors } from './checkpoint_tensors.js';
import type { RawConfig } from './presets.js';
import { MAX_SHARD_BYTES, planShards, shardIndex, type Shard } from './shards.js';
import type { TensorJob } from './tensor_job.js';
import { runTensorJobs } from './tensor_threads.js';
import { synthTokenizer } from './tokenizer.js';

export interface WriteProgress {
  bytes: number;
  totalBytes: number;
}

export interface CheckpointOptions {
  seed?: number;
  maxShardBytes?: number;
  /** Worker threads drawing tensors (default: a core each, at most 8); the bytes do not depend on it. */
  threads?: number;
  onProgress?: (p: WriteProgress) => void;
}

export interface WrittenCheckpoint {
  config: ModelConfig;
  /** config.json as written (token ids pointing at the synthetic tokenizer's specials). */
  rawConfig: RawConfig;
  shards: string[];
  tensorBytes: number;
}

/** `raw` is an HF config.json; it is validated as the server would read it before anything is written. */
export async function writeSynthCheckpoint(dir: string, raw: RawConfig, opts: CheckpointOptions = {}): Promise<WrittenCheckpoint> {
  const seed = opts.seed ?? 0;
  const given = parseModelConfig(raw, 'config.json');
  const tokenizer = synthTokenizer(given.vocabSize, given.maxPositionEmbeddings);
  // The real checkpoint's special-token ids mean nothing in the synthetic vocabulary: point them at ours.
  const rawConfig: RawConfig = {
    ...raw, bos_token_id: tokenizer.bosTokenId, eos_token_id: tokenizer.eosTokenId, torch_dtype: 'bfloat16',
    ...('dtype' in raw ? { dtype: 'bfloat16' } : {}),
  };
  const config = parseModelConfig(rawConfig, 'config.json');
  const tensors = checkpointTensors(config);
  const shards = planShards(tensors, opts.maxShardBytes ?? MAX_SHARD_BYTES);
  const totalBytes = shards.reduce((a, s) => a + s.bytes, 0);

  await mkdir(dir, { recursive: true });
  await removeOldWeights(dir);
  const json = (name: string, value: unknown): Promise<void> => writeFile(join(dir, name), `${JSON.stringify(value, null, 2)}\n`);
  await json('config.json', rawConfig);
  await json('generation_config.json', { bos_token_id: tokenizer.bosTokenId, eos_token_id: tokenizer.eosTokenId });
  await writeFile(join(dir, 'tokenizer.json'), JSON.stringify(tokenizer.tokenizerJson));
  await json('tokenizer_config.json', tokenizer.tokenizerConfig);

  await writeShards(dir, shards, totalBytes, seed, opts);
  if (shards.length > 1) await json(INDEX_FILE, shardIndex(shards));
  return { config, rawConfig, shards: shards.map((s) => s.file), tensorBytes: totalBytes };
}

/** Every shard's tensors, written in place under a temporary name, then renamed; nothing left behind on failure. */
async function writeShards(dir: string, shards: readonly Shard[], totalBytes: number, seed: number, opts: CheckpointOptions): Promise<void> {
  const files = shards.map((shard) => ({ shard, path: join(dir, shard.file), tmp: join(dir, `${shard.file}.partial-${process.pid}`) }));
  try {
    const jobs: TensorJob[] = [];
    for (const { shard, tmp } of files) {
      const header = encodeSafetensorsHeader(shard.tensors.map((t) => ({ name: t.name, dtype: 'BF16' as const, shape: t.shape })), { format: 'pt' });
      await writeFile(tmp, header);
      await truncate(tmp, header.byteLength + shard.bytes);
      let offset = header.byteLength;
      for (const t of shard.tensors) {
        const bytes = bf16Bytes(t);
        jobs.push({ file: tmp, offset, name: t.name, elements: bytes / 2, init: t.init, seed });
        offset += bytes;
      }
    }
    let bytes = 0;
    await runTensorJobs(jobs, (n) => opts.onProgress?.({ bytes: (bytes += n), totalBytes }), opts.threads);
    for (const { path, tmp } of files) await rename(tmp, path);
  } catch (e) {
    // The first error is the one to report: a temporary file that cannot be removed is left.
    await Promise.allSettled(files.map(({ tmp }) => rm(tmp, { force: true })));
    throw e;
  }
}

/** Weights of an earlier synth in the same folder: a stale index would shadow the new shards. */
async function removeOldWeights(dir: string): Promise<void> {
  for (const name of await readdir(dir)) {
    if (name === INDEX_FILE || /^model(-\d+-of-\d+)?\.safetensors$/.test(name)) await rm(join(dir, name), { force: true });
  }
}
