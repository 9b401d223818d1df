// Random PEFT LoRA adapters for a config: adapter_config.json + adapter_model.safetensors with
// PEFT's key names and shapes, bf16. Module paths and their in/out features come from the
// checkpoint rules (locate.ts), the same table the server places adapters with.
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

import type { ModelConfig } from '../checkpoint/config.js';
import { locateModule, moduleNames } from '../checkpoint/locate.js';
import { writeSafetensors, type TensorToWrite } from '../checkpoint/safetensors_writer.js';
import { bf16Chunks, type Init } from './bf16_chunks.js';
import { SynthError } from './errors.js';
import { hashString, Rng } from './rng.js';

/** Every linear of the attention and MLP blocks: what "all linears" means in PEFT recipes. */
export const DEFAULT_TARGETS = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'];

export interface AdapterSpec {
  count: number;
  rank: number;
  alpha: number;
  targets: readonly string[];
  seed?: number;
  /** Folder names are `${prefix}-000`, `${prefix}-001`, ... (default 'lora'). */
  prefix?: string;
  /** Written into adapter_config.json as base_model_name_or_path. */
  baseModel?: string;
}

export interface WrittenAdapter {
  name: string;
  path: string;
  bytes: number;
}

/**
 * The size of the LoRA update relative to the base weight (‖s·B·A‖ ≈ 0.1 ‖W‖ per element):
 * large enough that every adapter changes the output, small enough to keep activations sane.
 * With A ~ N(0, 1/in) and W ~ N(0, 1/in), s·B·A has std s·√r·σ_B/√in, so σ_B = 0.1 / (s·√r).
 */
const RELATIVE_DELTA = 0.1;
/** Embedding LoRA: the base embedding has std 0.02, so the delta aims at 0.1 × that. */
const EMBEDDING_STD = 0.02;

interface TargetModule {
  hf: string;
  embedding: boolean;
  inFeatures: number;
  outFeatures: number;
}

/** The modules `targets` name in this model, or an error naming the unknown target. */
export function targetModules(config: ModelConfig, targets: readonly string[]): TargetModule[] {
  const paths = [...moduleNames(config), 'model.embed_tokens'];
  const known = new Set(paths.map((p) => p.slice(p.lastIndexOf('.') + 1)));
  for (const t of targets) {
    if (!known.has(t)) throw new SynthError(`--targets: ${t} is not a module of the ${config.family} model (it has ${[...known].join(', ')})`);
  }
  const wanted = new Set(targets);
  return paths.filter((p) => wanted.has(p.slice(p.lastIndexOf('.') + 1))).map((hf) => {
    const loc = locateModule(config, config.family, hf)!;
    const embedding = loc.kind === 'embedding';
    // An embedding's LoRA input is the token id (vocab rows), its output the hidden size.
    return { hf, embedding, inFeatures: embedding ? loc.rows : loc.cols!, outFeatures: embedding ? loc.cols! : loc.rows };
  });
}

export async function writeSynthAdapters(
  root: string, config: ModelConfig, spec: AdapterSpec, onAdapter?: (a: WrittenAdapter, index: number) => void,
): Promise<WrittenAdapter[]> {
  const modules = targetModules(config, spec.targets);
  const scale = spec.alpha / spec.rank;
  const stdB = RELATIVE_DELTA / (scale * Math.sqrt(spec.rank));
  const written: WrittenAdapter[] = [];
  for (let i = 0; i < spec.count; i++) {
    const name = `${spec.prefix ?? 'lora'}-${String(i).padStart(3, '0')}`;
    const dir = join(root, name);
    await mkdir(dir, { recursive: true });
    const seed = ((spec.seed ?? 0) + 7919 * (i + 1)) >>> 0;
    const tensor = (key: string, shape: number[], init: Init): TensorToWrite => ({
      name: key, dtype: 'BF16', shape, data: bf16Chunks(shape[0] * shape[1], init, new Rng(seed, hashString(key))),
    });
    const tensors = modules.flatMap((m): TensorToWrite[] => {
      const key = `base_model.model.${m.hf}`;
      const shapeA = [spec.rank, m.inFeatures], shapeB = [m.outFeatures, spec.rank];
      return m.embedding
        ? [tensor(`${key}.lora_embedding_A`, shapeA, { kind: 'normal', std: 1 }),
          tensor(`${key}.lora_embedding_B`, shapeB, { kind: 'normal', std: RELATIVE_DELTA * EMBEDDING_STD / (scale * Math.sqrt(spec.rank)) })]
        : [tensor(`${key}.lora_A.weight`, shapeA, { kind: 'normal', std: 1 / Math.sqrt(m.inFeatures) }),
          tensor(`${key}.lora_B.weight`, shapeB, { kind: 'normal', std: stdB })];
    });
    await writeSafetensors(join(dir, 'adapter_model.safetensors'), tensors, { format: 'pt' });
    await writeFile(join(dir, 'adapter_config.json'), `${JSON.stringify(peftConfig(spec), null, 2)}\n`);
    const bytes = tensors.reduce((a, t) => a + t.shape[0] * t.shape[1] * 2, 0);
    written.push({ name, path: dir, bytes });
    onAdapter?.(written[i], i);
  }
  return written;
}

function peftConfig(spec: AdapterSpec): Record<string, unknown> {
  return {
    peft_type: 'LORA',
    task_type: 'CAUSAL_LM',
    base_model_name_or_path: spec.baseModel ?? null,
    r: spec.rank,
    lora_alpha: spec.alpha,
    lora_dropout: 0.0,
    target_modules: [...spec.targets],
    bias: 'none',
    use_rslora: false,
    use_dora: false,
    fan_in_fan_out: false,
    modules_to_save: null,
    inference_mode: true,
  };
}
