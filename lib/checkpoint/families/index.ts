import type { ModelFamily } from '../config.js';
import type { FamilyRules } from '../rules.js';
import { LLAMA_RULES } from './llama.js';
import { QWEN3_RULES } from './qwen3.js';

export const FAMILY_RULES: Readonly<Record<ModelFamily, FamilyRules>> = {
  llama: LLAMA_RULES,
  qwen3: QWEN3_RULES,
};

export function rulesFor(family: ModelFamily): FamilyRules {
  return FAMILY_RULES[family];
}
