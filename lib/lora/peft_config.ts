// adapter_config.json of a PEFT LoRA adapter: read, validated, and the per-module rules
// (which modules are targeted, at which rank and scale) answered from it.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import { AdapterError } from './errors.js';

export interface PeftConfig {
  file: string;
  r: number;
  alpha: number;
  useRslora: boolean;
  rankPattern: Record<string, number>;
  alphaPattern: Record<string, number>;
  /** A list of module names / suffixes, or a regex that must match the whole module path. */
  targetModules: string[] | string;
  excludeModules: string[] | string | null;
  layersToTransform: number[] | null;
  fanInFanOut: boolean;
}

type Raw = Record<string, unknown>;

export function readPeftConfig(dir: string): PeftConfig {
  const file = join(dir, 'adapter_config.json');
  if (!existsSync(file)) throw new AdapterError(`${dir}: no adapter_config.json (expected a PEFT adapter folder)`);
  let raw: Raw;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8')) as Raw;
  } catch (e) {
    throw new AdapterError(`${file}: not valid JSON (${(e as Error).message})`);
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new AdapterError(`${file}: must hold a JSON object (PEFT's LoraConfig), got ${JSON.stringify(raw)}`);
  }
  const bad = (key: string, what: string): never => {
    throw new AdapterError(`${file}: ${key} ${what}, got ${JSON.stringify(raw[key])}`);
  };
  const peftType = raw.peft_type ?? 'LORA';
  if (peftType !== 'LORA') throw new AdapterError(`${file}: peft_type ${JSON.stringify(peftType)} is not supported (only LORA adapters are)`);
  if (raw.use_dora === true) throw new AdapterError(`${file}: use_dora is true — DoRA adapters are not supported`);
  if (raw.bias !== undefined && raw.bias !== 'none') bad('bias', `must be "none" (LoRA bias terms are not supported)`);
  // Variants whose deltas are not B·A added to the served base weights: refused, not served as plain LoRA.
  const alora = raw.alora_invocation_tokens;
  if (alora !== undefined && alora !== null && !(Array.isArray(alora) && alora.length === 0)) {
    bad('alora_invocation_tokens', 'is set: activated LoRA (applied only after its invocation tokens) is not supported');
  }
  if (raw.layer_replication !== undefined && raw.layer_replication !== null) {
    bad('layer_replication', 'is set: adapters on replicated base layers are not supported');
  }
  const init = raw.init_lora_weights;
  if (typeof init === 'string' && /^(pissa|olora|corda|loftq)/.test(init)) {
    bad('init_lora_weights', 'names an initialisation that changes the base weights (PiSSA, OLoRA, CorDA, LoftQ): ' +
      'such an adapter needs its modified base; save it converted to plain LoRA (PEFT\'s path_initial_model_for_weight_conversion)');
  }
  const ms = raw.modules_to_save;
  if (Array.isArray(ms) && ms.length > 0) {
    // PEFT lists embed_tokens / lm_head here when it saves full copies of them; those are
    // checked against the base weights when the tensors are read (adapter.ts).
    const other = ms.filter((m) => !['embed_tokens', 'lm_head'].includes(String(m)));
    if (other.length > 0) bad('modules_to_save', 'may only name embed_tokens or lm_head (full module copies are not supported)');
  }
  const int = (key: string, min: number): number => {
    const v = raw[key];
    return typeof v === 'number' && Number.isInteger(v) && v >= min ? v : bad(key, `must be an integer >= ${min}`);
  };
  const numMap = (key: string): Record<string, number> => {
    const v = raw[key] ?? {};
    if (typeof v !== 'object' || v === null || Array.isArray(v) || Object.values(v).some((x) => typeof x !== 'number' || !(x > 0))) {
      return bad(key, 'must map module patterns to positive numbers');
    }
    return v as Record<string, number>;
  };
  const r = int('r', 1);
  const alpha = typeof raw.lora_alpha === 'number' ? raw.lora_alpha : bad('lora_alpha', 'must be a number');
  const targets = raw.target_modules;
  const targetModules = typeof targets === 'string' ? targets
    : Array.isArray(targets) && targets.length > 0 && targets.every((t) => typeof t === 'string') ? (targets as string[])
    : bad('target_modules', 'must be a non-empty list of module names or a regex string');
  const ex = raw.exclude_modules ?? null;
  const excludeModules = ex === null || typeof ex === 'string' || (Array.isArray(ex) && ex.every((t) => typeof t === 'string'))
    ? (ex as string[] | string | null) : bad('exclude_modules', 'must be a list of module names or a regex string');
  // Regexes PEFT compiles in Python; one JavaScript cannot compile is refused here, naming it.
  const regex = (key: string, pattern: string, full: boolean): void => {
    try {
      new RegExp(full ? `^(?:${pattern})$` : `^(.*\\.)?(${pattern})$`);
    } catch (e) {
      throw new AdapterError(`${file}: ${key} ${JSON.stringify(pattern)} is not a regular expression this server can use (${(e as Error).message})`);
    }
  };
  if (typeof targetModules === 'string') regex('target_modules', targetModules, true);
  if (typeof excludeModules === 'string') regex('exclude_modules', excludeModules, true);
  const rankPattern = numMap('rank_pattern'), alphaPattern = numMap('alpha_pattern');
  for (const k of Object.keys(rankPattern)) regex('rank_pattern key', k, false);
  for (const k of Object.keys(alphaPattern)) regex('alpha_pattern key', k, false);
  const ltt = raw.layers_to_transform ?? null;
  const layersToTransform = ltt === null ? null
    : typeof ltt === 'number' ? [ltt]
    : Array.isArray(ltt) && ltt.every((x) => Number.isInteger(x)) ? (ltt as number[])
    : bad('layers_to_transform', 'must be an integer or a list of integers');
  return {
    file, r, alpha, useRslora: raw.use_rslora === true, rankPattern, alphaPattern,
    targetModules, excludeModules, layersToTransform, fanInFanOut: raw.fan_in_fan_out === true,
  };
}

/** PEFT's rule: a list entry matches the module name or a `.name` suffix; a string is a full regex. */
export function matches(spec: string[] | string, path: string): boolean {
  if (typeof spec === 'string') return new RegExp(`^(?:${spec})$`).test(path);
  return spec.some((t) => path === t || path.endsWith(`.${t}`));
}

/** Whether PEFT would have put a LoRA on this module (path as in the HF model, e.g. model.layers.0.mlp.up_proj). */
export function isTargeted(c: PeftConfig, path: string, layer: number | null): boolean {
  if (!matches(c.targetModules, path)) return false;
  if (c.excludeModules !== null && matches(c.excludeModules, path)) return false;
  return c.layersToTransform === null || (layer !== null && c.layersToTransform.includes(layer));
}

/** PEFT picks the first pattern key that matches the end of the module path: `(.*\.)?(key)$`. */
function patternValue(pattern: Record<string, number>, path: string): number | undefined {
  const key = Object.keys(pattern).find((k) => new RegExp(`^(.*\\.)?(${k})$`).test(path));
  return key === undefined ? undefined : pattern[key];
}

/** The rank and the scale (alpha / r, or alpha / √r with rsLoRA) of one module. */
export function moduleRankScale(c: PeftConfig, path: string): { rank: number; scale: number } {
  const rank = patternValue(c.rankPattern, path) ?? c.r;
  const alpha = patternValue(c.alphaPattern, path) ?? c.alpha;
  return { rank, scale: c.useRslora ? alpha / Math.sqrt(rank) : alpha / rank };
}
