// Opens a Hugging Face checkpoint folder and builds its model on the CPU backend.
import type { FloatDType } from '../addon/index.js';
import { openCheckpoint } from '../checkpoint/checkpoint.js';
import { readModelConfig, type ModelConfig, type ModelFamily } from '../checkpoint/config.js';
import { planWeights } from '../checkpoint/plan.js';
import { LlamaModel } from './llama.js';
import { Qwen3Model } from './qwen3.js';
import { CPU, type Placement } from './placement.js';
import { loadWeights, type LoadProgress, type Weights } from './weights.js';

export type Model = LlamaModel;

const FAMILIES: Record<ModelFamily, new (c: ModelConfig, w: Weights, p: Placement) => Model> = {
  llama: LlamaModel,
  qwen3: Qwen3Model,
};

export interface LoadOptions {
  /** Weight storage type; by default each weight keeps its checkpoint dtype. */
  dtype?: FloatDType;
  placement?: Placement;
  onProgress?: (p: LoadProgress) => void;
}

export function loadModel(dir: string, options: LoadOptions = {}): Model {
  const config = readModelConfig(dir);
  const plans = planWeights(config, openCheckpoint(dir));
  const placement = options.placement ?? CPU;
  const weights = loadWeights(plans, { dtype: options.dtype, device: placement.device, onProgress: options.onProgress });
  return new FAMILIES[config.family](config, weights, placement);
}

export { KvCache } from './kv_cache.js';
export { stepTensors, type StepInput, type StepTensors } from './step.js';
export type { LoadProgress } from './weights.js';
export { CPU, cudaPlacement, type Placement } from './placement.js';
