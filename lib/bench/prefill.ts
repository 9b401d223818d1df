// How close a long prompt's prefill comes to the GPU's bf16 matmul peak: the FLOPs of one
// N-token prefill (every linear weight on every token, causal attention, the LM head on
// the last token) ÷ its time to first token ÷ the peak. Measured alone (c=1, one output
// token), so TTFT is the prefill plus one request's overhead (HTTP, scheduling, sampling).
// With LoRA on it runs on the base model and on the first adapter; the adapter's own FLOPs
// (2·rank·(in + out) a token per target, ~1% at rank 16) are not counted, so the two
// fractions compare the same work.
import { openCheckpoint } from '../checkpoint/checkpoint.js';
import { readModelConfig } from '../checkpoint/config.js';
import { planWeights } from '../checkpoint/plan.js';
import type { ServeConfig } from '../config/schema.js';
import type { CellReport } from './cell.js';

/** H200 dense bf16 tensor-core peak, TFLOP/s. */
export const DEFAULT_PEAK_TFLOPS = 989;

export interface PrefillCell {
  engine: CellReport['engine'];
  mix: CellReport['mix'];
  ttftMs: number;
  /** Achieved TFLOP/s: flops ÷ TTFT p50. */
  tflops: number;
  /** tflops ÷ the peak. */
  fraction: number;
}

export interface PrefillReport {
  tokens: number;
  peakTflops: number;
  /** FLOPs of one prefill of `tokens` tokens. */
  flops: number;
  cells: PrefillCell[];
}

/** 2 FLOPs per weight per token for the decoder's linears; attention 2·N²·head_dim per head and layer (causal). */
export function prefillFlops(config: ServeConfig, tokens: number): number {
  const model = readModelConfig(config.model);
  let decoderWeights = 0;
  for (const plan of planWeights(model, openCheckpoint(config.model))) {
    if (plan.kind !== 'linear' || plan.name === 'lm_head') continue;
    decoderWeights += plan.shape.reduce((a, d) => a * d, 1);
  }
  const attention = 2 * tokens * tokens * model.headDim * model.numHeads * model.numLayers;
  const lmHead = 2 * model.hiddenSize * model.vocabSize;
  return 2 * decoderWeights * tokens + attention + lmHead;
}

export function prefillReport(cells: readonly CellReport[], tokens: number, flops: number, peakTflops: number): PrefillReport {
  const out: PrefillCell[] = [];
  for (const c of cells) {
    const ttft = c.ttftMs.p50;
    if (ttft === null || ttft <= 0) continue;
    const tflops = flops / (ttft / 1e3) / 1e12;
    out.push({ engine: c.engine, mix: c.mix, ttftMs: ttft, tflops, fraction: tflops / peakTflops });
  }
  return { tokens, peakTflops, flops, cells: out };
}
