// Builds the engine's weights from a checkpoint plan: the addon reads each tensor's bytes
// straight from its file into its rows of the (fused) engine weight.
import { addon, type DeviceName, type FloatDType, type Tensor } from '../addon/index.js';
import type { WeightPlan } from '../checkpoint/plan.js';
import type { SafetensorsDtype } from '../checkpoint/dtype.js';
import { CheckpointError } from '../checkpoint/errors.js';

/** A model's weights by engine name; a LoRA pool widens the projections it adapts in place (lib/lora/slot_weights.ts). */
export type Weights = Map<string, Tensor>;

export interface LoadProgress {
  loaded: number;   // weights done
  total: number;
  bytes: number;    // bytes read so far
  name: string;     // the weight just loaded
}

const FILE_DTYPE: Partial<Record<SafetensorsDtype, FloatDType>> = { BF16: 'bf16', F16: 'f16', F32: 'f32' };

/**
 * Loads every planned weight. `dtype` overrides the storage type (converted while reading);
 * by default a weight keeps its checkpoint dtype. Tied weights share one tensor.
 */
export function loadWeights(
  plans: readonly WeightPlan[],
  options: { dtype?: FloatDType; device?: DeviceName; onProgress?: (p: LoadProgress) => void } = {},
): Map<string, Tensor> {
  const weights = new Map<string, Tensor>();
  let bytes = 0;
  try {
    plans.forEach((plan, i) => {
      if (plan.tiedTo !== undefined) {
        weights.set(plan.name, weights.get(plan.tiedTo)!);
      } else {
        const t = addon.empty(options.dtype ?? plan.dtype, [...plan.shape], options.device);
        weights.set(plan.name, t);
        const cols = plan.shape.length > 1 ? plan.shape[1] : 1;
        for (const s of plan.sources) {
          const src = FILE_DTYPE[s.entry.dtype];
          if (!src) throw new CheckpointError(`tensor dtype ${s.entry.dtype} cannot be loaded as a weight`, { file: s.entry.file, key: s.entry.key });
          addon.readInto(t, s.rowOffset * cols, s.entry.file, s.entry.offset, src, s.rows * cols);
          bytes += s.entry.nbytes;
        }
      }
      options.onProgress?.({ loaded: i + 1, total: plans.length, bytes, name: plan.name });
    });
  } catch (e) {
    for (const t of new Set(weights.values())) t.dispose();
    throw e;
  }
  return weights;
}
