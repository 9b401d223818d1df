import type { ModelConfig, ModelFamily } from './config.js';
import { rulesFor } from './families/index.js';
import { engineWeights, type FamilyRules, type WeightKind } from './rules.js';

/** Where an HF module's weight lives in the engine: which weight, which rows. */
export interface ModuleLocation {
  /** Canonical HF module path, e.g. 'model.layers.3.self_attn.k_proj'. */
  readonly hf: string;
  /** Engine weight, e.g. 'layers.3.qkv'. */
  readonly engine: string;
  readonly layer: number | null;
  readonly kind: WeightKind;
  /** This module's rows inside the engine weight: [rowOffset, rowOffset + rows). */
  readonly rowOffset: number;
  readonly rows: number;
  /** Input features; null for 1-D weights (norms). */
  readonly cols: number | null;
  readonly shardDim: 0 | 1 | null;
  /** Set when, with tie_word_embeddings, the engine weight is shared with this one (lm_head → 'embed'). */
  readonly tiedTo?: string;
}

/** PEFT wraps the model twice: base_model (LoraModel) → model (…ForCausalLM). */
const PEFT_PREFIX = 'base_model.model.';

/**
 * Maps an HF module path onto the engine weight and the rows it fills. Accepts the path as
 * PEFT writes it (`base_model.model.model.layers.3.self_attn.k_proj`), as HF names it
 * (`model.layers.3.self_attn.k_proj`, `lm_head`) or without the `model.` (`layers.3.self_attn.k_proj`).
 * Undefined when the model has no such module.
 */
export function locateModule(
  config: ModelConfig, family: ModelFamily | FamilyRules, hfModulePath: string,
): ModuleLocation | undefined {
  const index = moduleIndex(config, resolve(family));
  const path = hfModulePath.startsWith(PEFT_PREFIX) ? hfModulePath.slice(PEFT_PREFIX.length) : hfModulePath;
  return index.get(path) ?? (path.startsWith('model.') ? undefined : index.get(`model.${path}`));
}

/** Every HF linear module path of the model, in engine order (for validating LoRA target_modules). */
export function moduleNames(config: ModelConfig, family: ModelFamily | FamilyRules = config.family): string[] {
  return [...moduleIndex(config, resolve(family)).values()].filter((m) => m.kind === 'linear').map((m) => m.hf);
}

function resolve(family: ModelFamily | FamilyRules): FamilyRules {
  return typeof family === 'string' ? rulesFor(family) : family;
}

// LoRA loading locates hundreds of modules per adapter against the same config: build once.
const cache = new WeakMap<ModelConfig, Map<FamilyRules, Map<string, ModuleLocation>>>();

function moduleIndex(config: ModelConfig, family: FamilyRules): Map<string, ModuleLocation> {
  let perFamily = cache.get(config);
  if (perFamily === undefined) cache.set(config, (perFamily = new Map()));
  let index = perFamily.get(family);
  if (index !== undefined) return index;

  index = new Map();
  for (const w of engineWeights(config, family)) {
    const tied = w.rule.tiedTo !== undefined && config.tieWordEmbeddings;
    for (const part of w.parts) {
      index.set(part.hf, {
        hf: part.hf,
        engine: w.name,
        layer: w.layer,
        kind: w.rule.kind,
        rowOffset: part.rowOffset,
        rows: part.rows,
        cols: w.cols,
        shardDim: w.rule.shardDim,
        ...(tied ? { tiedTo: w.rule.tiedTo } : {}),
      });
    }
  }
  perFamily.set(family, index);
  return index;
}
