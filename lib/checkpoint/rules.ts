import type { ModelConfig, ModelFamily } from './config.js';

/**
 * Checkpoint rules: how a family's HF tensors map onto the engine's (fused) weights.
 * Each family states this once, as data (families/<name>.ts). The weight loader (plan.ts) and
 * LoRA adapter placement (locate.ts) both read the same table, so they cannot disagree on
 * where a weight goes.
 */

export type WeightKind = 'linear' | 'norm' | 'embedding';

/** A weight dimension as a function of the config, labelled with the config keys it comes from. */
export interface Dim {
  readonly label: string;
  readonly of: (c: ModelConfig) => number;
}

export const DIMS = {
  hidden: { label: 'hidden_size', of: (c) => c.hiddenSize },
  intermediate: { label: 'intermediate_size', of: (c) => c.intermediateSize },
  vocab: { label: 'vocab_size', of: (c) => c.vocabSize },
  headDim: { label: 'head_dim', of: (c) => c.headDim },
  qOut: { label: 'num_attention_heads*head_dim', of: (c) => c.numHeads * c.headDim },
  kvOut: { label: 'num_key_value_heads*head_dim', of: (c) => c.numKvHeads * c.headDim },
} as const satisfies Record<string, Dim>;

/** One HF module whose weight becomes rows of an engine weight. */
export interface WeightPartRule {
  /** Module path, relative to `<layerPrefix>.<i>.` for layer rules or to the root for model rules. */
  readonly hf: string;
  /** Its output features: the rows it contributes (for a 1-D norm weight, its length). */
  readonly rows: Dim;
}

export interface WeightRule {
  /** Engine weight name; layer rules become `layers.<i>.<engine>`. */
  readonly engine: string;
  readonly scope: 'layer' | 'model';
  readonly kind: WeightKind;
  /** Concatenated along dim 0 in this order (q, k, v → qkv; gate, up → gate_up). */
  readonly parts: readonly WeightPartRule[];
  /** Input features; null for 1-D weights (norms). */
  readonly cols: Dim | null;
  /**
   * Tensor-parallel split: 0 splits output rows (column-parallel), 1 splits input columns
   * (row-parallel), null replicates. A fused weight is split part by part, so each rank holds
   * its slice of every part (its q heads, its k/v heads), not a slice of the concatenation.
   */
  readonly shardDim: 0 | 1 | null;
  /** Whether each part also has a `.bias` (engine weight `<name>.bias`). */
  readonly bias?: (c: ModelConfig) => boolean;
  /** With tie_word_embeddings this weight is the named engine weight (lm_head → embed). */
  readonly tiedTo?: string;
}

export interface FamilyRules {
  readonly family: ModelFamily;
  /** HF path of the layer list, e.g. 'model.layers'. */
  readonly layerPrefix: string;
  /** In engine order; model rules before the first layer rule come before all layers. */
  readonly rules: readonly WeightRule[];
}

/** A part of a concrete engine weight, with the HF module path fully spelled out. */
export interface EngineWeightPart {
  /** e.g. 'model.layers.3.self_attn.k_proj' */
  readonly hf: string;
  readonly rowOffset: number;
  readonly rows: number;
  readonly rowsLabel: string;
}

/** A rule instantiated for one config (and one layer). */
export interface EngineWeight {
  /** e.g. 'layers.3.qkv', 'embed' */
  readonly name: string;
  readonly rule: WeightRule;
  readonly layer: number | null;
  /** [rows] for 1-D weights, else [rows, cols]. */
  readonly shape: readonly number[];
  readonly cols: number | null;
  readonly parts: readonly EngineWeightPart[];
}

/** Every engine weight of the model, in a stable order: model head rules, layers 0..n-1, the rest. */
export function engineWeights(config: ModelConfig, family: FamilyRules): EngineWeight[] {
  const out: EngineWeight[] = [];
  const layerRules = family.rules.filter((r) => r.scope === 'layer');
  let layersDone = false;
  for (const rule of family.rules) {
    if (rule.scope === 'model') {
      out.push(instantiate(config, rule, null, ''));
    } else if (!layersDone) {
      layersDone = true;
      for (let i = 0; i < config.numLayers; i++) {
        for (const lr of layerRules) out.push(instantiate(config, lr, i, `${family.layerPrefix}.${i}.`));
      }
    }
  }
  return out;
}

function instantiate(config: ModelConfig, rule: WeightRule, layer: number | null, hfPrefix: string): EngineWeight {
  let rowOffset = 0;
  const parts = rule.parts.map((p) => {
    const rows = p.rows.of(config);
    const part = { hf: `${hfPrefix}${p.hf}`, rowOffset, rows, rowsLabel: p.rows.label };
    rowOffset += rows;
    return part;
  });
  const cols = rule.cols === null ? null : rule.cols.of(config);
  return {
    name: layer === null ? rule.engine : `layers.${layer}.${rule.engine}`,
    rule,
    layer,
    shape: cols === null ? [rowOffset] : [rowOffset, cols],
    cols,
    parts,
  };
}
