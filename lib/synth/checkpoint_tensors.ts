// Every HF tensor a checkpoint of this config holds, read off the family's checkpoint rules
// (the table the weight loader plans from), so a synthetic checkpoint cannot drift from what
// the loader expects. Each tensor says how to fill it so activations stay in a sane range.
import type { ModelConfig } from '../checkpoint/config.js';
import { rulesFor } from '../checkpoint/families/index.js';
import { engineWeights } from '../checkpoint/rules.js';
import type { Init } from './bf16_chunks.js';

export interface SynthTensor {
  /** HF tensor name, e.g. 'model.layers.3.self_attn.k_proj.weight'. */
  name: string;
  shape: number[];
  init: Init;
}

/** Embedding std as HF initialises it (initializer_range); a linear's keeps x·W at x's scale. */
const EMBEDDING_STD = 0.02;

export function checkpointTensors(config: ModelConfig): SynthTensor[] {
  const out: SynthTensor[] = [];
  for (const w of engineWeights(config, rulesFor(config.family))) {
    // A tied lm_head is the embedding: real checkpoints do not store it, nor do we.
    if (w.rule.tiedTo !== undefined && config.tieWordEmbeddings) continue;
    for (const part of w.parts) {
      const init: Init = w.rule.kind === 'norm' ? { kind: 'constant', value: 1 }
        : w.rule.kind === 'embedding' ? { kind: 'normal', std: EMBEDDING_STD }
        : { kind: 'normal', std: 1 / Math.sqrt(w.cols!) };
      out.push({ name: `${part.hf}.weight`, shape: w.cols === null ? [part.rows] : [part.rows, w.cols], init });
      if (w.rule.bias?.(config)) out.push({ name: `${part.hf}.bias`, shape: [part.rows], init: { kind: 'constant', value: 0 } });
    }
  }
  return out;
}

export function bf16Bytes(t: { shape: readonly number[] }): number {
  return t.shape.reduce((a, d) => a * d, 1) * 2;
}
