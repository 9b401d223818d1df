// How tensors are split over safetensors files: in order, a new shard whenever the next tensor
// would push the current one past the limit (HF's save_pretrained rule), named as HF names them.
import { bf16Bytes, type SynthTensor } from './checkpoint_tensors.js';

/** HF's default max_shard_size is 5 GB; 2 GiB keeps every file below 32-bit offsets and quick to copy. */
export const MAX_SHARD_BYTES = 2 * 2 ** 30;

export interface Shard {
  file: string;
  tensors: SynthTensor[];
  bytes: number;
}

export function planShards(tensors: readonly SynthTensor[], maxBytes = MAX_SHARD_BYTES): Shard[] {
  const groups: { tensors: SynthTensor[]; bytes: number }[] = [];
  for (const t of tensors) {
    const size = bf16Bytes(t);
    const last = groups.at(-1);
    // A tensor larger than the limit gets a shard of its own rather than failing.
    if (last !== undefined && last.bytes + size <= maxBytes) {
      last.tensors.push(t);
      last.bytes += size;
    } else {
      groups.push({ tensors: [t], bytes: size });
    }
  }
  const n = groups.length;
  const pad = (i: number): string => String(i).padStart(5, '0');
  return groups.map((g, i) => ({ ...g, file: n === 1 ? 'model.safetensors' : `model-${pad(i + 1)}-of-${pad(n)}.safetensors` }));
}

/** model.safetensors.index.json for more than one shard. */
export function shardIndex(shards: readonly Shard[]): { metadata: { total_size: number }; weight_map: Record<string, string> } {
  const weightMap: Record<string, string> = {};
  for (const s of shards) for (const t of s.tensors) weightMap[t.name] = s.file;
  return { metadata: { total_size: shards.reduce((a, s) => a + s.bytes, 0) }, weight_map: weightMap };
}
