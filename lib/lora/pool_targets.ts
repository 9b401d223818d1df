// Which modules the adapter pool gets slots for when serve.yaml names no targets. Every
// adapted step runs the LoRA ops of every pool target, adapted or not: a target no adapter
// adapts costs its ops for nothing (the embedding's and lm_head's, 1-1.5% of one adapter's
// decode step: bench/RESULTS.md, twenty-ninth session). Without runtime updates the adapters
// are the ones listed, so their own targets are all the pool needs; with them (or with none
// listed) an adapter loaded later may target anything, so the pool takes every target.
import type { ModelConfig } from '../checkpoint/config.js';
import { moduleName, readAdapter } from './adapter.js';
import { ALL_TARGETS } from './targets.js';

export interface PoolTargetSettings {
  /** serve.yaml's resources.lora.targets: these, when given. */
  targets?: string[];
  maxRank: number;
  runtimeUpdates?: boolean;
  adapters: { name: string; path: string }[];
}

/**
 * The pool's targets, in ALL_TARGETS' order. Reads each listed adapter's header (not its
 * weights) and refuses a bad one as loading it would.
 */
export function poolTargets(config: ModelConfig, s: PoolTargetSettings): string[] {
  if (s.targets) return s.targets;
  if (s.runtimeUpdates || s.adapters.length === 0) return [...ALL_TARGETS];
  const limits = { maxRank: s.maxRank, targets: new Set(ALL_TARGETS) };
  const used = new Set(s.adapters.flatMap((a) => readAdapter(a.name, a.path, config, limits).modules.map((m) => moduleName(m.hf))));
  return ALL_TARGETS.filter((t) => used.has(t));
}
