// The eager steps' shapes, met once before serving (as vLLM's profile run meets them). A GEMM
// shape's first call at a cuBLASLt row bucket (or at a row count up to addon.gemmTunedRows, 64)
// picks its algorithm and may run that kernel for the first time: it held the host 2.5-5 ms a
// projection, each of the step's first layer's in turn, while the GPU drained. Qwen3-0.6B base
// requests at 32 concurrent (H200, `mstar bench --mix base`): the LoRA-on engine's eager steps,
// whose widened weights pick other kernels than the warmed decode shapes, took 21-22 such calls
// (59-92 ms) against 6-10 without LoRA, and 8-11 ms a step against 4-5.
//
// A warm-up step is padding: every row's KV slot is -1 (no write) and every block-table entry
// block 0 (attention only reads it), so no sequence's cache changes.
import { addon } from '../addon/index.js';
import type { StepInput } from '../models/index.js';

/** Row counts up to which each count makes a GEMM plan of its own (native cuBLASLt's rule). */
const OWN_PLANS = addon.gemmTunedRows;
/** Tokens of a warm-up step's sequences above OWN_PLANS rows: a prefill chunk's, so that attention runs its prefill kernel. */
const CHUNK = 128;

/**
 * Row counts to warm: every count up to OWN_PLANS (each its own GEMM plan) and each row bucket
 * above (`buckets`, from addon.gemmRowBuckets) up to maxTokens.
 */
export function warmUpSizes(maxTokens: number, buckets: readonly number[]): number[] {
  const small = Array.from({ length: Math.min(OWN_PLANS, maxTokens) }, (_, i) => i + 1);
  return [...small, ...buckets.filter((n) => n > OWN_PLANS && n <= maxTokens)];
}

/**
 * A padding step of n token rows in at most maxSeqs sequences (one row each up to OWN_PLANS
 * rows, so that the logits GEMM meets every row count; chunks of CHUNK above), each sequence's
 * last row wanting logits; with a LoRA plan where `lora` (every row on slot 0, no adapter).
 */
export function warmUpStep(n: number, maxSeqs: number, blockSize: number, lora: boolean): StepInput {
  const seqs = Math.max(1, Math.min(maxSeqs, n <= OWN_PLANS ? n : Math.ceil(n / CHUNK)));
  const queryStarts = Int32Array.from({ length: seqs + 1 }, (_, s) => Math.round((s * n) / seqs));
  const lens = Int32Array.from({ length: seqs }, (_, s) => queryStarts[s + 1] - queryStarts[s]);
  const maxBlocks = Math.ceil(Math.max(...lens) / blockSize);
  const positions = new Int32Array(n);
  for (let s = 0; s < seqs; s++) for (let r = queryStarts[s]; r < queryStarts[s + 1]; r++) positions[r] = r - queryStarts[s];
  const logitRows = Int32Array.from({ length: seqs }, (_, s) => queryStarts[s + 1] - 1);
  return {
    tokens: new Int32Array(n),
    positions,
    slots: new Int32Array(n).fill(-1),
    queryStarts,
    contextLens: lens,
    blockTables: new Int32Array(seqs * maxBlocks),
    maxBlocks,
    logitRows,
    lora: lora ? { rowSlots: new Int32Array(n), logitSlots: new Int32Array(seqs), embedRows: new Int32Array(n) } : undefined,
  };
}
