// The host side of CUDA-graph decode steps, free of the addon (unit-tested on the CPU):
// which batch sizes get a graph, which steps may replay one, and the padded input arrays a
// replay reads. A graph is captured for a bucket size B and reads every input from static
// buffers sized for the largest bucket; a batch of n <= B rows fills rows [0, n) and pads
// rows [n, B) so that they touch nothing real:
//   - KV slot -1 (kvWrite skips the row) and a block-table row of -1 (attention masks
//     every key), context length 1: no read or write of any sequence's cache;
//   - token 0, position 0, adapter slot 0 (no LoRA delta), greedy sampling;
// every kernel handles rows independently, so padding cannot change the real rows.
import type { ScheduledSeq } from './scheduler.js';
import type { Sequence } from './sequence.js';

/** Larger decode batches run eagerly (their launches are a small part of their step). */
export const MAX_GRAPH_BATCH = 256;

/** Batch sizes that get a graph: 1, 2, 4, ... below the limit, and the limit itself. */
export function graphBuckets(maxBatchSize: number, maxNumBatchedTokens: number): number[] {
  const limit = Math.min(maxBatchSize, maxNumBatchedTokens, MAX_GRAPH_BATCH);
  const out: number[] = [];
  for (let b = 1; b < limit; b *= 2) out.push(b);
  if (limit >= 1) out.push(limit);
  return out;
}

/** The smallest bucket holding n rows (buckets ascending); undefined above the largest. */
export function bucketFor(buckets: readonly number[], n: number): number | undefined {
  return n < 1 ? undefined : buckets.find((b) => b >= n);
}

/** Block-table columns of the static buffers: enough for a sequence of maxModelLen tokens. */
export function tableWidth(maxModelLen: number, blockSize: number): number {
  return Math.max(1, Math.ceil(maxModelLen / blockSize));
}

/**
 * Why this step cannot replay a decode graph (it then runs eagerly), or undefined when it
 * can: every entry is one decode token that samples, without logprobs, whose blocks fit
 * the static block table, and the batch fits the largest bucket.
 */
export function graphIneligible(
  batch: readonly ScheduledSeq[], maxBucket: number, width: number, blockSize: number,
): string | undefined {
  if (batch.length === 0) return 'empty step';
  if (batch.length > maxBucket) return `batch of ${batch.length} is above the largest graph bucket (${maxBucket})`;
  for (const e of batch) {
    if (e.count !== 1 || !e.samples) return 'prefill';
    if (e.seq.params.logprobs !== null) return 'logprobs requested';
    if (e.seq.numOutputs < e.seq.params.minTokens) return 'min_tokens masks stop tokens';
    if (e.seq.blocks.length > width) return `a sequence holds ${e.seq.blocks.length} blocks, above the table width ${width}`;
    if (Math.floor(e.start / blockSize) >= e.seq.blocks.length) return 'a token has no KV block reserved';
  }
  return undefined;
}

/**
 * Host arrays of every per-step input, for buckets up to `maxBucket` rows. `ints` packs the
 * i32 inputs (one upload), field f of row r at (index of f in FIELDS) * maxBucket + r; queryStarts
 * ([0, 1, ..., maxBucket]) and logitRows ([0, ..., maxBucket - 1]) are the same for every
 * decode step and are set once. The block table is separate (maxBucket x width, uploaded
 * only for the bucket's rows).
 */
export class DecodeInputs {
  static readonly FIELDS = [
    'tokens', 'positions', 'slots', 'contextLens', 'rowSlots', 'embedRows', 'topK', 'steps', 'logitRows', 'fromRows',
  ] as const;
  readonly ints: Int32Array;
  readonly tables: Int32Array;
  readonly temperature: Float32Array;
  readonly topP: Float32Array;
  readonly seeds: BigInt64Array;

  constructor(readonly maxBucket: number, readonly width: number) {
    const M = maxBucket;
    this.ints = new Int32Array(DecodeInputs.FIELDS.length * M + M + 1);
    this.tables = new Int32Array(M * width).fill(-1);
    this.temperature = new Float32Array(M);
    this.topP = new Float32Array(M).fill(1);
    this.seeds = new BigInt64Array(M);
    const logitRows = this.field('logitRows');
    for (let r = 0; r < M; r++) logitRows[r] = r;
    const starts = this.queryStarts();
    for (let r = 0; r <= M; r++) starts[r] = r;
  }

  /** Offset (in elements of `ints`) of a field. */
  offset(name: (typeof DecodeInputs.FIELDS)[number]): number {
    return DecodeInputs.FIELDS.indexOf(name) * this.maxBucket;
  }

  field(name: (typeof DecodeInputs.FIELDS)[number]): Int32Array {
    return this.ints.subarray(this.offset(name), this.offset(name) + this.maxBucket);
  }

  /** queryStarts sits after the fields: maxBucket + 1 entries. */
  queryStartsOffset(): number {
    return DecodeInputs.FIELDS.length * this.maxBucket;
  }

  queryStarts(): Int32Array {
    return this.ints.subarray(this.queryStartsOffset(), this.queryStartsOffset() + this.maxBucket + 1);
  }

  /**
   * Writes a decode batch into rows [0, batch.length) and padding into the rest of
   * [0, bucket). `vocab` places each row in the embedding adapters' stacked table. A row
   * whose token is unread (Sequence.unread) has fromRows[r] = its row among the previous
   * step's samples, from `unread` (feedTokens fills in the token and its embedding row on
   * the device, from the id buffer that step left); every other row has fromRows[r] = -1.
   * slotOf: the adapter slot a sequence's rows run (none where its adapter is merged into the
   * weights). Returns whether any row runs an adapter.
   */
  fill(
    batch: readonly ScheduledSeq[], bucket: number, blockSize: number, vocab: number,
    unread?: ReadonlyMap<Sequence, number>, slotOf = (seq: Sequence) => seq.slot,
  ): boolean {
    if (batch.length > bucket || bucket > this.maxBucket) {
      throw new Error(`decode inputs: ${batch.length} rows in a bucket of ${bucket} (at most ${this.maxBucket})`);
    }
    const tokens = this.field('tokens'), positions = this.field('positions'), slots = this.field('slots');
    const contextLens = this.field('contextLens'), rowSlots = this.field('rowSlots'), embedRows = this.field('embedRows');
    const topK = this.field('topK'), steps = this.field('steps'), fromRows = this.field('fromRows');
    const W = this.width;
    let adapters = false;
    for (let r = 0; r < bucket; r++) {
      const row = this.tables.subarray(r * W, (r + 1) * W);
      row.fill(-1);
      const e = batch[r];
      if (e === undefined) {  // padding
        tokens[r] = 0; positions[r] = 0; slots[r] = -1; contextLens[r] = 1;
        rowSlots[r] = 0; embedRows[r] = 0; topK[r] = 0; steps[r] = 0; fromRows[r] = -1;
        this.temperature[r] = 0; this.topP[r] = 1; this.seeds[r] = 0n;
        continue;
      }
      const { seq, start: p } = e;
      const from = seq.unread > 0 ? unread?.get(seq) : undefined;
      if (seq.unread > 0 && from === undefined) throw new Error(`decode inputs: the token of sequence ${seq.id} is not read and has no row`);
      const token = from === undefined ? seq.tokenAt(p) : 0;
      fromRows[r] = from ?? -1;
      tokens[r] = token;
      positions[r] = p;
      slots[r] = seq.blocks[Math.floor(p / blockSize)] * blockSize + (p % blockSize);
      contextLens[r] = p + 1;
      row.set(seq.blocks);
      const slot = slotOf(seq);
      rowSlots[r] = slot;
      embedRows[r] = slot * vocab + token;
      if (slot > 0) adapters = true;
      topK[r] = seq.params.topK;
      steps[r] = seq.numOutputs;
      this.temperature[r] = seq.params.temperature;
      this.topP[r] = seq.params.topP;
      this.seeds[r] = seq.seed;
    }
    return adapters;
  }
}
