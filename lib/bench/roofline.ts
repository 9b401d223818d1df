// How close decode at batch 1 comes to the memory-bandwidth floor. A decode step must read every
// weight once, the sequence's KV cache, and the adapter's A and B; at c=1 nothing else is large,
// so floor = bytes ÷ HBM bandwidth, and achieved fraction = floor ÷ measured step time.
//
// The step time is the median over requests of (e2e - TTFT) / (tokens - 1): at c=1 every step
// decodes this one sequence, so that is the mean step time, exactly. ITL p50 is shown beside it,
// but it is a gap between stream chunks: when chunks arrive bunched (a busy event loop, a
// server that flushes several tokens at once), ITL p50 drops towards zero while steps do not.
import { join } from 'node:path';

import { openCheckpoint } from '../checkpoint/checkpoint.js';
import { readModelConfig } from '../checkpoint/config.js';
import { planWeights } from '../checkpoint/plan.js';
import { openSafetensors } from '../checkpoint/safetensors.js';
import type { ServeConfig } from '../config/schema.js';
import type { CellReport } from './cell.js';
import type { HbmBandwidth } from './hbm.js';

const DTYPE_BYTES = { bf16: 2, f16: 2, f32: 4 } as const;

export interface ModelBytes {
  /** Weight bytes one decode step reads. */
  weightBytes: number;
  /** KV-cache bytes per token of context (K and V, every layer). */
  kvBytesPerToken: number;
}

export interface RooflineCell {
  engine: CellReport['engine'];
  mix: CellReport['mix'];
  /** Measured decode step: TPOT p50, ms. */
  stepMs: number;
  /** ITL p50, ms, for comparison. */
  itlMs: number | null;
  adapterBytes: number;
  /** (weights + KV + adapter) ÷ bandwidth, ms. */
  floorMs: number;
  /** floorMs ÷ stepMs: the share of HBM bandwidth the step achieves. */
  fraction: number;
}

export interface RooflineReport {
  hbmGbps: number;
  /** Where hbmGbps came from: --hbm-gbps, a measurement on the server's GPU, or the datasheet. */
  hbmSource: HbmBandwidth['source'];
  weightBytes: number;
  kvBytesPerToken: number;
  /** Mean context length over a request's decode steps. */
  contextTokens: number;
  cells: RooflineCell[];
}

/**
 * Bytes as the engine holds them (serve.yaml's dtype, else the checkpoint's). An untied
 * embedding table is not counted: a decode step gathers one row of it. A tied one is, once:
 * the LM head reads all of it.
 */
export function modelBytes(config: ServeConfig): ModelBytes {
  const model = readModelConfig(config.model);
  let weightBytes = 0;
  for (const plan of planWeights(model, openCheckpoint(config.model))) {
    if (plan.tiedTo !== undefined) continue;
    if (plan.kind === 'embedding' && !model.tieWordEmbeddings) continue;
    weightBytes += plan.shape.reduce((a, d) => a * d, 1) * DTYPE_BYTES[config.dtype ?? plan.dtype];
  }
  // The engine's KV cache: f32 on the cpu or with dtype f32, else bf16 (CUDA's activation
  // type, whatever the checkpoint's dtype).
  const kvDtype = config.dtype === 'f32' || config.device === 'cpu' ? 'f32' : 'bf16';
  return { weightBytes, kvBytesPerToken: 2 * model.numLayers * model.numKvHeads * model.headDim * DTYPE_BYTES[kvDtype] };
}

/** Tensor bytes of a PEFT adapter folder. */
export function adapterBytes(dir: string): number {
  let n = 0;
  for (const t of openSafetensors(join(dir, 'adapter_model.safetensors')).tensors.values()) n += t.nbytes;
  return n;
}

/** Roofline of every c=1 cell; `adapterBytesOf` gives the adapter bytes a cell's mix reads per step. */
export function roofline(
  cells: readonly CellReport[], bytes: ModelBytes, contextTokens: number, hbm: HbmBandwidth,
  adapterBytesOf: (mix: CellReport['mix']) => number,
): RooflineReport {
  const hbmGbps = hbm.gbps;
  const out: RooflineCell[] = [];
  for (const c of cells) {
    const step = c.tpotMs.p50;
    if (c.load.kind !== 'closed' || c.load.concurrency !== 1 || step === null || step <= 0) continue;
    const adapter = c.engine === 'lora-on' ? adapterBytesOf(c.mix) : 0;
    const floorMs = (bytes.weightBytes + bytes.kvBytesPerToken * contextTokens + adapter) / (hbmGbps * 1e9) * 1e3;
    out.push({ engine: c.engine, mix: c.mix, stepMs: step, itlMs: c.itlMs.p50, adapterBytes: adapter, floorMs, fraction: floorMs / step });
  }
  return { hbmGbps, hbmSource: hbm.source, ...bytes, contextTokens, cells: out };
}
