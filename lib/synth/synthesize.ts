// `mstar synth` end to end: a random checkpoint, N random adapters for it and a serve.yaml.
import { join } from 'node:path';

import { writeSynthAdapters, type WrittenAdapter } from './adapters.js';
import { writeSynthCheckpoint, type WriteProgress, type WrittenCheckpoint } from './checkpoint.js';
import type { RawConfig } from './presets.js';
import { writeServeYaml } from './serve_yaml.js';

export interface SynthOptions {
  out: string;
  config: RawConfig;
  /** served_model_name in serve.yaml, and base_model_name_or_path of the adapters. */
  name: string;
  seed?: number;
  /** Overrides num_hidden_layers (quick tests of a big model's shapes). */
  layers?: number;
  adapters?: { count: number; rank: number; alpha: number; targets: readonly string[] };
  onWeights?: (p: WriteProgress) => void;
  onAdapter?: (a: WrittenAdapter, index: number, count: number) => void;
}

export interface SynthResult {
  checkpoint: WrittenCheckpoint;
  adapters: WrittenAdapter[];
  serveYaml: string;
}

export async function synthesize(opts: SynthOptions): Promise<SynthResult> {
  const raw = withLayers(opts.config, opts.layers);
  const checkpoint = await writeSynthCheckpoint(opts.out, raw, { seed: opts.seed, onProgress: opts.onWeights });
  const spec = opts.adapters;
  const adapters = spec === undefined || spec.count === 0 ? [] : await writeSynthAdapters(
    join(opts.out, 'adapters'), checkpoint.config,
    { ...spec, seed: opts.seed, baseModel: opts.name },
    (a, i) => opts.onAdapter?.(a, i, spec.count));
  const serveYaml = await writeServeYaml(opts.out, {
    name: opts.name,
    maxPositionEmbeddings: checkpoint.config.maxPositionEmbeddings,
    adapters,
    rank: spec?.rank ?? 16,
    targets: spec?.targets ?? [],
  });
  return { checkpoint, adapters, serveYaml };
}

/** A copy with `layers` layers; per-layer lists in the config are cut to match. */
export function withLayers(raw: RawConfig, layers: number | undefined): RawConfig {
  if (layers === undefined) return raw;
  const out: RawConfig = { ...raw, num_hidden_layers: layers };
  if (Array.isArray(raw['layer_types'])) out['layer_types'] = raw['layer_types'].slice(0, layers);
  if (typeof raw['max_window_layers'] === 'number') out['max_window_layers'] = Math.min(raw['max_window_layers'], layers);
  return out;
}
