// Reads a PEFT LoRA folder against the served model: every tensor is matched to a module
// through the model's checkpoint rules (the same table the weight loader uses), shapes and
// ranks are checked, and anything the engine cannot serve is refused with its key.
import { existsSync } from 'node:fs';
import { join } from 'node:path';

import type { ModelConfig } from '../checkpoint/config.js';
import { locateModule, moduleNames, type ModuleLocation } from '../checkpoint/locate.js';
import { openSafetensors, type TensorEntry } from '../checkpoint/safetensors.js';
import { CheckpointError, formatShape } from '../checkpoint/errors.js';
import { AdapterError } from './errors.js';
import { isTargeted, matches, moduleRankScale, readPeftConfig, type PeftConfig } from './peft_config.js';

export interface AdapterModule {
  /** HF module path, e.g. 'model.layers.0.self_attn.k_proj'. */
  hf: string;
  location: ModuleLocation;
  rank: number;
  scale: number;
  /** lora_A [rank, in], or for embeddings lora_embedding_A [rank, vocab]. */
  a: TensorEntry;
  /** lora_B [rows, rank], or for embeddings lora_embedding_B [dim, rank]. */
  b: TensorEntry;
  embedding: boolean;
}

/** A full copy of a base weight PEFT saved beside the adapter (embed_tokens / lm_head). */
export interface BaseCopy {
  engine: string;
  entry: TensorEntry;
}

export interface Adapter {
  name: string;
  dir: string;
  config: PeftConfig;
  modules: AdapterModule[];
  baseCopies: BaseCopy[];
  maxRank: number;
}

export interface AdapterLimits {
  maxRank: number;
  /** HF module names the pool serves, e.g. 'q_proj', 'down_proj', 'embed_tokens', 'lm_head'. */
  targets: ReadonlySet<string>;
}

export { ALL_TARGETS } from './targets.js';

const PREFIX = 'base_model.model.';
const LORA_KEY = /^(.*)\.(lora_A\.weight|lora_B\.weight|lora_embedding_A|lora_embedding_B)$/;

/** The module's own name: 'model.layers.3.self_attn.k_proj' → 'k_proj'. */
export function moduleName(hfPath: string): string {
  return hfPath.slice(hfPath.lastIndexOf('.') + 1);
}

export function readAdapter(name: string, dir: string, model: ModelConfig, limits: AdapterLimits): Adapter {
  const config = readPeftConfig(dir);
  const file = join(dir, 'adapter_model.safetensors');
  if (!existsSync(file)) {
    const bin = existsSync(join(dir, 'adapter_model.bin'));
    throw new AdapterError(bin
      ? `${dir}: adapter_model.bin is a pickled PyTorch file, which is not loaded for safety; convert it to adapter_model.safetensors (e.g. with peft's save_pretrained(safe_serialization=True))`
      : `${dir}: no adapter_model.safetensors`);
  }
  let tensors: ReadonlyMap<string, TensorEntry>;
  try {
    tensors = openSafetensors(file).tensors;
  } catch (e) {
    if (e instanceof CheckpointError) throw new AdapterError(`adapter ${name}: ${e.message}`);
    throw e;
  }
  const fail = (key: string, msg: string): never => { throw new AdapterError(`adapter ${name}: ${file}: ${key}: ${msg}`); };

  checkTargetModules(name, config, model);
  const pairs = new Map<string, { a?: TensorEntry; b?: TensorEntry; embedding: boolean }>();
  const baseCopies: BaseCopy[] = [];
  for (const [key, entry] of tensors) {
    if (!key.startsWith(PREFIX)) fail(key, `expected keys to start with "${PREFIX}" (a PEFT LoRA adapter)`);
    if (key.includes('lora_magnitude_vector')) fail(key, 'DoRA magnitude vectors are not supported');
    const m = LORA_KEY.exec(key);
    if (!m) {
      baseCopies.push(baseCopy(key, entry, model, fail));
      continue;
    }
    const [, path, part] = m;
    const embedding = part.startsWith('lora_embedding');
    const p = pairs.get(path) ?? { embedding };
    if (p.embedding !== embedding) fail(key, `mixes lora_embedding_* and lora_A / lora_B tensors for one module`);
    if (part.includes('_A')) p.a = entry;
    else p.b = entry;
    pairs.set(path, p);
  }

  const modules: AdapterModule[] = [];
  const seen = new Map<string, string>();  // engine module -> the key that named it first
  for (const [path, p] of pairs) {
    const key = path;  // as written in the file, prefix included
    const loc = locateModule(model, model.family, path);
    if (!loc) fail(key, `the ${model.family} model has no module ${path.slice(PREFIX.length)}`);
    // As PEFT loads it: LoRA layers go only where the config targets (target_modules,
    // exclude_modules, layers_to_transform); tensors for other modules are ignored.
    if (!isTargeted(config, loc!.hf, layerOf(loc!.hf))) continue;
    const first = seen.get(loc!.hf);
    if (first !== undefined) fail(key, `names module ${loc!.hf} again (already as ${first})`);
    seen.set(loc!.hf, key);
    if (!limits.targets.has(moduleName(loc!.hf))) {
      fail(key, `target ${moduleName(loc!.hf)} is not enabled in resources.lora.targets (${[...limits.targets].join(', ')})`);
    }
    if (!p.a || !p.b) fail(key, `has ${p.a ? 'lora_A' : 'lora_B'} but not ${p.a ? 'lora_B' : 'lora_A'}`);
    const hf = loc!.hf;
    const { rank, scale } = moduleRankScale(config, hf);
    const a = p.a!, b = p.b!;
    // An embedding's "input" is the token id (vocab rows) and its output the hidden size (cols).
    const inFeatures = p.embedding ? loc!.rows : loc!.cols!;
    const outFeatures = p.embedding ? loc!.cols! : loc!.rows;
    const expectA = [rank, inFeatures], expectB = [outFeatures, rank];
    if (a.shape.join() !== expectA.join()) fail(a.key, `shape ${formatShape(a.shape)} does not fit: expected ${formatShape(expectA)} (rank ${rank}, ${p.embedding ? 'vocab_size' : 'in features'} ${inFeatures})`);
    if (b.shape.join() !== expectB.join()) fail(b.key, `shape ${formatShape(b.shape)} does not fit: expected ${formatShape(expectB)} (out features ${outFeatures}, rank ${rank})`);
    if (rank > limits.maxRank) fail(a.key, `rank ${rank} is above the pool's max_rank ${limits.maxRank}`);
    if (!['BF16', 'F16', 'F32'].includes(a.dtype) || !['BF16', 'F16', 'F32'].includes(b.dtype)) fail(a.key, `dtype ${a.dtype}/${b.dtype} is not bf16, f16 or f32`);
    if (!p.embedding && loc!.kind === 'embedding') fail(key, 'an embedding module needs lora_embedding_A / lora_embedding_B');
    if (p.embedding && loc!.kind !== 'embedding') fail(key, 'lora_embedding_* tensors on a module that is not an embedding');
    modules.push({ hf, location: loc!, rank, scale, a, b, embedding: p.embedding });
  }
  if (modules.length === 0) throw new AdapterError(`adapter ${name}: ${file} holds no LoRA weights for any module of the model`);
  return { name, dir, config, modules, baseCopies, maxRank: Math.max(...modules.map((m) => m.rank)) };
}

/** Every listed target must name a module of the model (a typo must not serve the base model). */
function checkTargetModules(name: string, config: PeftConfig, model: ModelConfig): void {
  const names = moduleNames(model);
  const embeds = ['model.embed_tokens', 'lm_head'];
  const all = [...names, ...embeds];
  if (typeof config.targetModules === 'string') {
    if (!all.some((p) => isTargeted(config, p, layerOf(p)))) {
      throw new AdapterError(`adapter ${name}: ${config.file}: target_modules regex ${JSON.stringify(config.targetModules)} matches no module of the ${model.family} model`);
    }
    return;
  }
  for (const t of config.targetModules) {
    if (!all.some((p) => matches([t], p))) {
      throw new AdapterError(`adapter ${name}: ${config.file}: target module ${JSON.stringify(t)} is not a module of the ${model.family} model (it has ${[...new Set(all.map((p) => p.split('.').at(-1)))].join(', ')})`);
    }
  }
}

function layerOf(path: string): number | null {
  const m = /\.layers\.(\d+)\./.exec(path);
  return m ? Number(m[1]) : null;
}

/** A non-LoRA tensor: allowed only as PEFT's saved copy of embed_tokens or lm_head. */
function baseCopy(key: string, entry: TensorEntry, model: ModelConfig, fail: (k: string, m: string) => never): BaseCopy {
  const path = key.slice(PREFIX.length).replace(/\.(base_layer\.)?weight$/, '').replace(/\.modules_to_save(\.default)?$/, '');
  if (key.endsWith('.bias')) fail(key, 'bias terms are not supported');
  const loc = key.endsWith('.weight') ? locateModule(model, model.family, path) : undefined;
  if (!loc || !['embed', 'lm_head'].includes(loc.engine)) {
    fail(key, 'is neither a LoRA weight nor a saved copy of embed_tokens / lm_head');
  }
  if (!['BF16', 'F16', 'F32'].includes(entry.dtype)) fail(key, `dtype ${entry.dtype} is not bf16, f16 or f32`);
  return { engine: loc!.engine, entry };
}
