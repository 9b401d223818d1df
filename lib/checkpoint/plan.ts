import type { Checkpoint } from './checkpoint.js';
import type { ModelConfig } from './config.js';
import { KNOWN_UNSUPPORTED_DTYPES, weightDtypeOf, type WeightDtype } from './dtype.js';
import { CheckpointError } from './errors.js';
import { rulesFor } from './families/index.js';
import { engineWeights, type EngineWeight, type FamilyRules, type WeightKind } from './rules.js';
import type { TensorEntry } from './safetensors.js';

/** One HF tensor that fills rows [rowOffset, rowOffset + rows) of an engine weight. */
export interface WeightSource {
  readonly entry: TensorEntry;
  readonly rowOffset: number;
  readonly rows: number;
}

/** What the loader must build for one engine weight, and from which bytes. */
export interface WeightPlan {
  /** e.g. 'layers.3.qkv', 'layers.3.qkv.bias', 'embed' */
  readonly name: string;
  readonly kind: WeightKind | 'bias';
  readonly layer: number | null;
  readonly shape: readonly number[];
  readonly dtype: WeightDtype;
  readonly shardDim: 0 | 1 | null;
  readonly sources: readonly WeightSource[];
  /** Set when this weight is another one (tied lm_head → 'embed'): share it, do not load twice. */
  readonly tiedTo?: string;
}

/**
 * Checks the checkpoint against the family's rules and says, for every engine weight, which
 * tensors fill which rows. Reads headers only; every mismatch is a CheckpointError naming the
 * file, the key, the expected shape and the config keys behind it.
 */
export function planWeights(
  config: ModelConfig, checkpoint: Checkpoint, family: FamilyRules = rulesFor(config.family),
): WeightPlan[] {
  const plans: WeightPlan[] = [];
  const byName = new Map<string, WeightPlan>();
  const used = new Set<string>();
  const add = (p: WeightPlan): void => {
    plans.push(p);
    byName.set(p.name, p);
  };

  for (const w of engineWeights(config, family)) {
    if (w.rule.tiedTo !== undefined && config.tieWordEmbeddings) {
      // Like transformers, a stored lm_head.weight is ignored when the embeddings are tied.
      for (const part of w.parts) used.add(`${part.hf}.weight`);
      const target = byName.get(w.rule.tiedTo);
      if (target === undefined) throw new Error(`rules for ${family.family}: ${w.name} is tied to ${w.rule.tiedTo}, which is not planned before it`);
      add({ ...target, name: w.name, kind: w.rule.kind, tiedTo: target.name });
      continue;
    }
    add(planOne(checkpoint, w, 'weight', used));
    if (w.rule.bias?.(config)) add(planOne(checkpoint, w, 'bias', used));
  }

  refuseUnknownWeights(config, family, checkpoint, used);
  return plans;
}

function planOne(checkpoint: Checkpoint, w: EngineWeight, param: 'weight' | 'bias', used: Set<string>): WeightPlan {
  const sources = w.parts.map((part) => {
    const key = `${part.hf}.${param}`;
    const expected = param === 'bias' || w.cols === null ? [part.rows] : [part.rows, w.cols];
    const why = param === 'bias' || w.cols === null || w.rule.cols === null
      ? `(${part.rowsLabel}=${part.rows})`
      : `(${part.rowsLabel}=${part.rows}, ${w.rule.cols.label}=${w.cols})`;
    const entry = checkpoint.require(key, expected, why);
    used.add(key);
    return { entry, rowOffset: part.rowOffset, rows: part.rows };
  });

  const dtype = sources.map((s) => loadableDtype(s.entry));
  const first = sources[0].entry;
  const odd = sources.find((s, i) => dtype[i] !== dtype[0]);
  if (odd !== undefined) {
    throw new CheckpointError(
      `tensor "${odd.entry.key}" is ${odd.entry.dtype} but "${first.key}", fused with it into ${w.name}, is ${first.dtype}`,
      { file: odd.entry.file, key: odd.entry.key });
  }
  const isBias = param === 'bias';
  return {
    name: isBias ? `${w.name}.bias` : w.name,
    kind: isBias ? 'bias' : w.rule.kind,
    layer: w.layer,
    shape: isBias ? [w.shape[0]] : w.shape,
    dtype: dtype[0],
    // A row-parallel layer's bias is added once, after the reduction: every rank keeps all of it.
    shardDim: isBias ? (w.rule.shardDim === 0 ? 0 : null) : w.rule.shardDim,
    sources,
  };
}

function loadableDtype(entry: TensorEntry): WeightDtype {
  const dtype = weightDtypeOf(entry.dtype);
  if (dtype !== undefined) return dtype;
  const why = KNOWN_UNSUPPORTED_DTYPES.has(entry.dtype) ? 'FP8 checkpoints are not supported' : 'not a weight type';
  throw new CheckpointError(
    `tensor "${entry.key}" has dtype ${entry.dtype} (${why}; weights must be BF16, F16 or F32)`,
    { file: entry.file, key: entry.key });
}

const QUANTIZED_SUFFIXES = ['.qweight', '.qzeros', '.scales', '.g_idx', '.weight_scale', '.weight_scale_inv', '.input_scale', '.absmax', '.quant_state'];

/**
 * Tensors no rule consumed. Buffers (rotary inv_freq and the like) are harmless and skipped;
 * a parameter of a module we do not model would silently change the model, so it is an error.
 */
function refuseUnknownWeights(
  config: ModelConfig, family: FamilyRules, checkpoint: Checkpoint, used: ReadonlySet<string>,
): void {
  const unknown: { key: string; why: string }[] = [];
  for (const key of checkpoint.keys()) {
    if (used.has(key)) continue;
    const why = unknownWeightReason(config, family, key);
    if (why !== undefined) unknown.push({ key, why });
  }
  if (unknown.length === 0) return;
  const { key, why } = unknown[0];
  const more = unknown.length > 1 ? ` (and ${unknown.length - 1} more unexpected tensors)` : '';
  throw new CheckpointError(`tensor "${key}": ${why}${more}`, { file: checkpoint.get(key)?.file, key });
}

function unknownWeightReason(config: ModelConfig, family: FamilyRules, key: string): string | undefined {
  if (/\.experts\.|\.shared_experts?\.|\.mlp\.gate\.weight$/.test(key)) {
    return 'MoE experts are not supported';
  }
  if (QUANTIZED_SUFFIXES.some((s) => key.endsWith(s))) {
    return 'quantized checkpoints are not supported';
  }
  if (!key.endsWith('.weight') && !key.endsWith('.bias')) return undefined;
  const layerPrefix = `${family.layerPrefix}.`;
  const layer = key.startsWith(layerPrefix) ? Number.parseInt(key.slice(layerPrefix.length), 10) : NaN;
  if (layer >= config.numLayers) {
    return `layer ${layer} is beyond num_hidden_layers=${config.numLayers}`;
  }
  return `not a parameter of any ${config.family} module mstar knows ` +
    `(attention_bias=${config.attentionBias}, mlp_bias=${config.mlpBias}, tie_word_embeddings=${config.tieWordEmbeddings})`;
}
