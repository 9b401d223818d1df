// Writes a random-weight checkpoint folder: config.json, the safetensors shards (+ index when
// more than one), generation_config.json and a tokenizer. Tensor bytes are streamed 1 MiB at a
// time, so writing an 8B model costs a few MiB of memory.
import { mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

import { INDEX_FILE } from '../checkpoint/checkpoint.js';
import { parseModelConfig, type ModelConfig } from '../checkpoint/config.js';
import { writeSafetensors, type ChunkWriter, type TensorToWrite } from '../checkpoint/safetensors_writer.js';
import { bf16Chunks } from './bf16_chunks.js';
import { checkpointTensors, type SynthTensor } from './checkpoint_tensors.js';
import type { RawConfig } from './presets.js';
import { hashString, Rng } from './rng.js';
import { MAX_SHARD_BYTES, planShards, shardIndex } from './shards.js';
import { synthTokenizer } from './tokenizer.js';

export interface WriteProgress {
  /** Shard being written. */
  file: string;
  bytes: number;
  totalBytes: number;
}

export interface CheckpointOptions {
  seed?: number;
  maxShardBytes?: number;
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

  let bytes = 0;
  for (const shard of shards) {
    const counted = (t: SynthTensor): TensorToWrite['data'] => {
      const produce = bf16Chunks(t.shape.reduce((a, d) => a * d, 1), t.init, new Rng(seed, hashString(t.name)));
      return (write: ChunkWriter) => produce(async (chunk) => {
        await write(chunk);
        bytes += chunk.byteLength;
        opts.onProgress?.({ file: shard.file, bytes, totalBytes });
      });
    };
    await writeSafetensors(join(dir, shard.file),
      shard.tensors.map((t) => ({ name: t.name, dtype: 'BF16' as const, shape: t.shape, data: counted(t) })),
      { format: 'pt' });
  }
  if (shards.length > 1) await json(INDEX_FILE, shardIndex(shards));
  return { config, rawConfig, shards: shards.map((s) => s.file), tensorBytes: totalBytes };
}

/** Weights of an earlier synth in the same folder: a stale index would shadow the new shards. */
async function removeOldWeights(dir: string): Promise<void> {
  for (const name of await readdir(dir)) {
    if (name === INDEX_FILE || /^model(-\d+-of-\d+)?\.safetensors$/.test(name)) await rm(join(dir, name), { force: true });
  }
}
