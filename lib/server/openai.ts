// Pieces every OpenAI response shares: ids, the model check, usage.
import { randomUUID } from 'node:crypto';

import { invalidRequest, modelNotFound } from './errors.js';
import type { Engine } from './engine_port.js';
import type { Body } from './fields.js';
import type { GenerationEnd } from './generation.js';

export interface RequestedModel {
  /** What the response's `model` field says. */
  name: string;
  /** The LoRA adapter the request runs, if `model` named one. */
  adapter?: string;
}

/**
 * `model` may be left out (vLLM serves its base model then); otherwise it must be the served
 * name or a loaded adapter's name (as vLLM, the OpenAI `model` field picks the adapter).
 */
export function resolveModel(body: Body, servedName: string, engine: Engine): RequestedModel {
  const model = body.model;
  if (model === undefined || model === null) return { name: servedName };
  if (typeof model !== 'string') throw invalidRequest('`model` must be a string.', 'model');
  if (model === servedName) return { name: servedName };
  if (engine.adapters?.().some((a) => a.name === model)) return { name: model, adapter: model };
  throw modelNotFound(model);
}

/** e.g. "cmpl-3f2a…": the same id is the engine's request id. */
export function newRequestId(prefix: 'cmpl' | 'chatcmpl'): string {
  return `${prefix}-${randomUUID().replaceAll('-', '')}`;
}

export function unixSeconds(): number {
  return Math.floor(Date.now() / 1000);
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

export function usageOf(end: GenerationEnd): Usage {
  return {
    prompt_tokens: end.promptTokens,
    completion_tokens: end.completionTokens,
    total_tokens: end.promptTokens + end.completionTokens,
    prompt_tokens_details: { cached_tokens: end.cachedPromptTokens },
  };
}
