import { existsSync, readFileSync, statSync } from 'node:fs';
import { isAbsolute, join, normalize } from 'node:path';
import { CheckpointError, formatShape } from './errors.js';
import { openSafetensors, type SafetensorsFile, type TensorEntry } from './safetensors.js';

export const INDEX_FILE = 'model.safetensors.index.json';
export const SINGLE_FILE = 'model.safetensors';
const PICKLED_FILES = ['pytorch_model.bin', 'pytorch_model.bin.index.json'];

/** The tensors of a HF checkpoint folder (one or many safetensors shards), headers only. */
export interface Checkpoint {
  readonly dir: string;
  /** The shards, in the order the index first names them (or the single model.safetensors). */
  readonly files: readonly SafetensorsFile[];
  get(key: string): TensorEntry | undefined;
  /**
   * The tensor, or a CheckpointError naming the file and key; with `expectedShape`, also checks
   * the shape. `what` says where the expected shape comes from, e.g. "(hidden_size=2048)".
   */
  require(key: string, expectedShape?: readonly number[], what?: string): TensorEntry;
  keys(): string[];
}

export function openCheckpoint(dir: string): Checkpoint {
  if (!existsSync(dir) || !statSync(dir).isDirectory()) {
    throw new CheckpointError('checkpoint folder does not exist or is not a folder', { file: dir });
  }
  // The single file first, as transformers looks (a leftover index beside it is not read).
  const singlePath = join(dir, SINGLE_FILE);
  if (existsSync(singlePath)) {
    const file = openSafetensors(singlePath);
    return makeCheckpoint(dir, singlePath, [file], new Map(file.tensors));
  }
  const indexPath = join(dir, INDEX_FILE);
  if (existsSync(indexPath)) return fromIndex(dir, indexPath);
  const pickled = PICKLED_FILES.find((f) => existsSync(join(dir, f)));
  if (pickled !== undefined) {
    throw new CheckpointError(
      'pickled PyTorch checkpoints are not supported (they can run code when loaded); ' +
      'convert the model to safetensors first', { file: join(dir, pickled) });
  }
  throw new CheckpointError(`no ${SINGLE_FILE} or ${INDEX_FILE} in the checkpoint folder`, { file: dir });
}

function fromIndex(dir: string, indexPath: string): Checkpoint {
  const weightMap = readWeightMap(indexPath);

  const keysByShard = new Map<string, string[]>();
  for (const [key, shard] of weightMap) {
    const list = keysByShard.get(shard);
    if (list) list.push(key);
    else keysByShard.set(shard, [key]);
  }

  const files: SafetensorsFile[] = [];
  const tensors = new Map<string, TensorEntry>();
  for (const [shard, shardKeys] of keysByShard) {
    const shardPath = join(dir, shard);
    if (!existsSync(shardPath)) {
      throw new CheckpointError(
        `shard "${shard}" listed in the index (e.g. for "${shardKeys[0]}") does not exist at ${shardPath}`,
        { file: indexPath, key: shardKeys[0] });
    }
    const file = openSafetensors(shardPath);
    files.push(file);
    for (const key of shardKeys) {
      if (!file.tensors.has(key)) {
        throw new CheckpointError(
          `the index maps tensor "${key}" to "${shard}", but that shard has no such tensor`, { file: shardPath, key });
      }
    }
    for (const [key, entry] of file.tensors) {
      const mapped = weightMap.get(key);
      if (mapped !== undefined && mapped !== shard) {
        throw new CheckpointError(
          `tensor "${key}" is in shard "${shard}" but the index maps it to "${mapped}"`, { file: shardPath, key });
      }
      // A tensor the index does not mention is still loaded (HF loads whole shards), but only once.
      const earlier = tensors.get(key);
      if (mapped === undefined && earlier !== undefined) {
        throw new CheckpointError(
          `tensor "${key}" is in two shards (also in ${earlier.file}) and the index names neither`,
          { file: shardPath, key });
      }
      tensors.set(key, entry);
    }
  }
  return makeCheckpoint(dir, indexPath, files, tensors);
}

function readWeightMap(indexPath: string): Map<string, string> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(indexPath, 'utf8'));
  } catch (e) {
    throw new CheckpointError(`cannot read the index as JSON: ${(e as Error).message}`, { file: indexPath });
  }
  const weightMap = typeof parsed === 'object' && parsed !== null ? (parsed as Record<string, unknown>)['weight_map'] : undefined;
  if (typeof weightMap !== 'object' || weightMap === null || Array.isArray(weightMap)) {
    throw new CheckpointError('"weight_map" is missing or not an object', { file: indexPath });
  }
  const map = new Map<string, string>();
  for (const [key, shard] of Object.entries(weightMap)) {
    // Shards must live inside the checkpoint folder: an index must not point elsewhere on disk.
    if (typeof shard !== 'string' || shard === '' || isAbsolute(shard) || normalize(shard).startsWith('..')) {
      throw new CheckpointError(
        `"weight_map" entry for "${key}" must be a shard file name inside the folder, got ${JSON.stringify(shard)}`,
        { file: indexPath, key });
    }
    map.set(key, shard);
  }
  if (map.size === 0) throw new CheckpointError('"weight_map" is empty', { file: indexPath });
  return map;
}

/** `lookupFile` is the file a missing key is reported against: the index, or the single file. */
function makeCheckpoint(
  dir: string, lookupFile: string, files: SafetensorsFile[], tensors: Map<string, TensorEntry>,
): Checkpoint {
  return {
    dir,
    files,
    get: (key) => tensors.get(key),
    keys: () => [...tensors.keys()],
    require(key, expectedShape, what) {
      const entry = tensors.get(key);
      const expectation = expectedShape
        ? ` (expected shape ${formatShape(expectedShape)}${what ? ` ${what}` : ''})`
        : '';
      if (entry === undefined) {
        throw new CheckpointError(`tensor "${key}" is missing from the checkpoint${expectation}`,
          { file: lookupFile, key });
      }
      if (expectedShape && !sameShape(entry.shape, expectedShape)) {
        throw new CheckpointError(
          `tensor "${key}" has shape ${formatShape(entry.shape)}, expected ${formatShape(expectedShape)}` +
          `${what ? ` ${what}` : ''}`, { file: entry.file, key });
      }
      return entry;
    },
  };
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}
