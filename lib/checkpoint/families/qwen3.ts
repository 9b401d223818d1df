import { DIMS, type FamilyRules, type WeightRule } from '../rules.js';
import { LLAMA_RULES } from './llama.js';

/** Qwen3 adds a per-head RMSNorm on q and k (replicated: every rank norms its own heads). */
const QK_NORMS: WeightRule[] = [
  { engine: 'q_norm', scope: 'layer', kind: 'norm', shardDim: null,
    parts: [{ hf: 'self_attn.q_norm', rows: DIMS.headDim }], cols: null },
  { engine: 'k_norm', scope: 'layer', kind: 'norm', shardDim: null,
    parts: [{ hf: 'self_attn.k_norm', rows: DIMS.headDim }], cols: null },
];

/**
 * Qwen3 (dense): Llama's layout plus q/k norms after qkv. Its MLP never has a bias; config
 * parsing already pins mlpBias to false, so the Llama rules apply unchanged.
 */
export const QWEN3_RULES: FamilyRules = {
  family: 'qwen3',
  layerPrefix: 'model.layers',
  rules: LLAMA_RULES.rules.flatMap((r) => (r.engine === 'qkv' ? [r, ...QK_NORMS] : [r])),
};
