// Opens a Hugging Face checkpoint folder and builds its model on the CPU backend.
import type { FloatDType } from '../addon/index.js';
import { openCheckpoint } from '../checkpoint/checkpoint.js';
import { readModelConfig, type ModelConfig, type ModelFamily } from '../checkpoint/config.js';
import { planWeights } from '../checkpoint/plan.js';
import { LlamaModel } from './llama.js';
import { Qwen3Model } from './qwen3.js';
import { loadWeights, type LoadProgress, type Weights } from './weights.js';

export type Model = LlamaModel;

const FAMILIES: Record<ModelFamily, new (c: ModelConfig, w: Weights) => Model> = {
  llama: LlamaModel,
  qwen3: Qwen3Model,
};

export interface LoadOptions {
  dtype?: FloatDType;
  onProgress?: (p: LoadProgress) => void;
}

export function loadModel(dir: string, options: LoadOptions = {}): Model {
  const config = readModelConfig(dir);
  const plans = planWeights(config, openCheckpoint(dir));
  return new FAMILIES[config.family](config, loadWeights(plans, options));
}

export { KvCache } from './kv_cache.js';
export { stepTensors, type StepInput, type StepTensors } from './step.js';
export type { LoadProgress } from './weights.js';
