// Paged KV cache: kvWrite, then pagedAttention over shuffled, non-contiguous block tables.
import { describe, expect, it } from 'vitest';

import { addon, expectClose, expectOpError, expectSame, f32, floats, i32, type Tensor } from './helpers.js';
import { Rng } from './random.js';
import * as ref from './reference.js';
import type { HeadLayout } from './reference.js';

/** One sequence of a batch: `cached` tokens already in the cache, `fresh` new ones this step. */
interface Seq {
  cached: number;
  fresh: number;
}

const context = (s: Seq) => s.cached + s.fresh;

/** Columns [from, to) of every `width`-wide row. */
function columns(rows: Float32Array, width: number, from: number, to: number): Float32Array {
  const n = rows.length / width;
  const out = new Float32Array(n * (to - from));
  for (let r = 0; r < n; ++r) out.set(rows.subarray(r * width + from, r * width + to), r * (to - from));
  return out;
}

/** The q, k or v part of fused qkv rows: [tokens, heads * headDim]. */
function part(rows: Float32Array, l: HeadLayout, which: 'q' | 'k' | 'v'): Float32Array {
  const heads = which === 'q' ? l.numHeads : l.numKvHeads;
  const from = ref.headOffset(l, which, 0);
  return columns(rows, ref.rowWidth(l), from, from + heads * l.headDim);
}

function concat(a: Float32Array, b: Float32Array): Float32Array {
  const out = new Float32Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

/** A NaN-filled cache, so reading any slot that was never written poisons the output. */
function nanCache(numBlocks: number, blockSize: number, l: HeadLayout): { k: Tensor; v: Tensor } {
  const shape = [numBlocks, blockSize, l.numKvHeads, l.headDim];
  const fill = () => addon.fromArray('f32', shape, new Float32Array(numBlocks * blockSize * l.numKvHeads * l.headDim).fill(NaN));
  return { k: fill(), v: fill() };
}

/**
 * Gives every sequence the blocks its context needs, drawn from a shuffled pool with a few
 * spare blocks, so tables are neither contiguous nor ordered. Columns past a sequence's
 * last block are padding (-1) that must never be read.
 */
function allocateBlocks(rng: Rng, seqs: Seq[], blockSize: number) {
  const needed = seqs.map((s) => Math.ceil(context(s) / blockSize));
  const numBlocks = needed.reduce((a, b) => a + b, 0) + 3;
  const pool = rng.shuffle(Array.from({ length: numBlocks }, (_, i) => i));
  const maxBlocks = Math.max(...needed) + 1;
  const tables = needed.map((count) => {
    const row = pool.splice(0, count);
    return [...row, ...new Array(maxBlocks - count).fill(-1)];
  });
  const slot = (s: number, pos: number) => tables[s][Math.floor(pos / blockSize)] * blockSize + (pos % blockSize);
  return { numBlocks, maxBlocks, tables, slot };
}

/** Slots of positions [from, to) of every sequence, in batch order. */
function slotsFor(seqs: Seq[], slot: (s: number, pos: number) => number, range: (s: Seq) => [number, number]): number[] {
  return seqs.flatMap((s, i) => {
    const [from, to] = range(s);
    return Array.from({ length: to - from }, (_, j) => slot(i, from + j));
  });
}

/**
 * Runs one engine step: earlier steps' tokens are written first (one kvWrite), then this
 * step's fresh tokens are written and attended to, all sequences in one call each.
 * Checks every output row against plain causal attention in float64.
 */
function checkStep(seed: number, seqs: Seq[], blockSize: number, l: HeadLayout): void {
  const rng = new Rng(seed);
  const width = ref.rowWidth(l);
  const { numBlocks, maxBlocks, tables, slot } = allocateBlocks(rng, seqs, blockSize);
  const cache = nanCache(numBlocks, blockSize, l);
  const kv = (qkv: Tensor, slots: number[]) =>
    addon.kvWrite(cache.k, cache.v, qkv, i32([slots.length], slots), l.numHeads, l.numKvHeads, l.headDim);

  const history = seqs.map((s) => rng.floats(s.cached * width, -2, 2));
  const historyRows = history.reduce(concat, new Float32Array(0));
  kv(f32([historyRows.length / width, width], historyRows), slotsFor(seqs, slot, (s) => [0, s.cached]));

  const fresh = seqs.map((s) => rng.floats(s.fresh * width, -2, 2));
  const freshRows = fresh.reduce(concat, new Float32Array(0));
  const tokens = freshRows.length / width;
  const qkv = f32([tokens, width], freshRows);
  kv(qkv, slotsFor(seqs, slot, (s) => [s.cached, context(s)]));

  const queryStarts = [0];
  for (const s of seqs) queryStarts.push(queryStarts[queryStarts.length - 1] + s.fresh);
  const scale = 1 / Math.sqrt(l.headDim);
  const out = addon.empty('f32', [tokens, l.numHeads * l.headDim]);
  addon.pagedAttention(
    out, qkv, cache.k, cache.v, i32([seqs.length, maxBlocks], tables.flat()), i32([seqs.length + 1], queryStarts),
    i32([seqs.length], seqs.map(context)), l.numHeads, l.numKvHeads, l.headDim, scale,
  );

  const got = floats(out);
  const outWidth = l.numHeads * l.headDim;
  seqs.forEach((s, i) => {
    const all = concat(history[i], fresh[i]);
    const want = ref.causalAttention(part(fresh[i], l, 'q'), part(all, l, 'k'), part(all, l, 'v'), l, scale);
    expectClose(got.subarray(queryStarts[i] * outWidth, queryStarts[i + 1] * outWidth), want);
  });
}

// Batch order mixes the kinds on purpose: decode first, a full prefill, prefill chunks
// (one starting exactly on a block boundary), and decode again.
const MIXED: Seq[] = [
  { cached: 21, fresh: 1 },
  { cached: 0, fresh: 9 },
  { cached: 13, fresh: 6 },
  { cached: 4, fresh: 1 },
  { cached: 16, fresh: 4 },
  { cached: 37, fresh: 12 },
];

const LAYOUTS: HeadLayout[] = [
  { numHeads: 4, numKvHeads: 2, headDim: 7 },
  { numHeads: 4, numKvHeads: 1, headDim: 33 },
  { numHeads: 2, numKvHeads: 2, headDim: 130 },
  { numHeads: 1, numKvHeads: 1, headDim: 1 },
];

describe('pagedAttention', () => {
  describe.each([4, 16])('block size %i', (blockSize) => {
    it.each(LAYOUTS)('H $numHeads, K $numKvHeads, hd $headDim: prefill, prefill chunk and decode in one batch', (l) => {
      checkStep(blockSize * 100 + l.headDim + l.numKvHeads, MIXED, blockSize, l);
    });

    it('a single decode token at the very start of a sequence', () => {
      checkStep(blockSize, [{ cached: 0, fresh: 1 }], blockSize, LAYOUTS[0]);
    });
  });

  it('a sequence with no new tokens gives no rows and does not disturb its neighbours', () => {
    checkStep(5, [{ cached: 6, fresh: 0 }, { cached: 3, fresh: 2 }, { cached: 9, fresh: 0 }, { cached: 0, fresh: 3 }], 4, LAYOUTS[1]);
  });
});

describe('kvWrite', () => {
  it('stores k and v of each token at its slot and skips negative slots', () => {
    const l: HeadLayout = { numHeads: 4, numKvHeads: 2, headDim: 3 };
    const [numBlocks, blockSize] = [3, 4];
    const kvWidth = l.numKvHeads * l.headDim;
    const rng = new Rng(17);
    const rows = rng.floats(6 * ref.rowWidth(l));
    const slots = [5, -1, 0, 11, -7, 3];
    const sentinel = Float32Array.from({ length: numBlocks * blockSize * kvWidth }, (_, i) => 1000 + i);
    const k = f32([numBlocks, blockSize, l.numKvHeads, l.headDim], sentinel);
    const v = f32([numBlocks, blockSize, l.numKvHeads, l.headDim], sentinel);
    addon.kvWrite(k, v, f32([6, ref.rowWidth(l)], rows), i32([6], slots), l.numHeads, l.numKvHeads, l.headDim);

    for (const [cache, which] of [[k, 'k'], [v, 'v']] as const) {
      const want = sentinel.slice();
      const parts = part(rows, l, which);
      slots.forEach((s, t) => {
        if (s >= 0) want.set(parts.subarray(t * kvWidth, (t + 1) * kvWidth), s * kvWidth);
      });
      expectSame(floats(cache), want);
    }
  });

  it('rejects bad arguments, naming them', () => {
    const l: HeadLayout = { numHeads: 2, numKvHeads: 1, headDim: 4 };
    const k = addon.zeros('f32', [2, 4, 1, 4]);
    const v = addon.zeros('f32', [2, 4, 1, 4]);
    const qkv = addon.zeros('f32', [3, ref.rowWidth(l)]);
    const slots = i32([3], [0, 1, 2]);
    const write = (kc: Tensor, vc: Tensor, q: Tensor, s: Tensor) => () => addon.kvWrite(kc, vc, q, s, 2, 1, 4);
    expectOpError(write(k, v, qkv, i32([3], [0, 8, 1])), /^kvWrite: slots\[1\] = 8 is past the cache's 8 slots/);
    expectOpError(write(k, v, qkv, i32([2], [0, 1])), /^kvWrite: slots must be \[3\]/);
    expectOpError(write(k, addon.zeros('f32', [3, 4, 1, 4]), qkv, slots), /^kvWrite: vCache \(the shape of kCache\) must be \[2, 4, 1, 4\]/);
    expectOpError(write(addon.zeros('bf16', [2, 4, 1, 4]), v, qkv, slots), /^kvWrite: kCache must be f32/);
    expectOpError(write(addon.zeros('f32', [2, 4, 2, 4]), v, qkv, slots), /^kvWrite: kCache \(\[blocks, blockSize, numKvHeads, headDim\]\) must be/);
    expectOpError(write(k, v, addon.zeros('f32', [3, 12]), slots), /^kvWrite: qkv/);
    expectOpError(write(addon.zeros('f32', [2, 0, 1, 4]), addon.zeros('f32', [2, 0, 1, 4]), qkv, slots), /^kvWrite: kCache .* block size/);
    expect(floats(k).every((x) => x === 0)).toBe(true);
  });
});

describe('pagedAttention rejects bad arguments, naming them', () => {
  const l: HeadLayout = { numHeads: 2, numKvHeads: 1, headDim: 4 };
  const k = addon.zeros('f32', [3, 4, 1, 4]);
  const v = addon.zeros('f32', [3, 4, 1, 4]);
  const qkv = addon.zeros('f32', [3, ref.rowWidth(l)]);
  const out = addon.empty('f32', [3, 8]);
  // Two sequences: 2 new tokens of a 6-token context, then 1 new token of a 3-token context.
  const good = { tables: [[2, 0], [1, -1]], starts: [0, 2, 3], lens: [6, 3] };
  const attend = (o: { tables?: number[][]; starts?: number[]; lens?: number[]; out?: Tensor; kc?: Tensor }) => () => {
    const t = o.tables ?? good.tables;
    const starts = o.starts ?? good.starts;
    const lens = o.lens ?? good.lens;
    addon.pagedAttention(
      o.out ?? out, qkv, o.kc ?? k, v, i32([t.length, t[0].length], t.flat()), i32([starts.length], starts),
      i32([lens.length], lens), l.numHeads, l.numKvHeads, l.headDim, 0.5,
    );
  };

  it('accepts the good arguments', () => {
    attend({})();
  });

  it('block ids', () => {
    expectOpError(attend({ tables: [[2, 3], [1, -1]] }), /^pagedAttention: blockTables\[0\]\[1\] = 3 is not a block of the cache/);
    expectOpError(attend({ tables: [[2, 0], [-1, 1]] }), /^pagedAttention: blockTables\[1\]\[0\] = -1 is not a block of the cache/);
    expectOpError(attend({ tables: [[2], [1]] }), /^pagedAttention: sequence 0 needs 2 blocks but blockTables has 1 columns/);
    expectOpError(attend({ tables: [[2, 0]] }), /^pagedAttention: blockTables .* needs one row per sequence \(2\)/);
  });

  it('query starts and context lengths', () => {
    expectOpError(attend({ lens: [1, 3] }), /^pagedAttention: sequence 0 has 2 new tokens but a context of 1/);
    expectOpError(attend({ starts: [0, 2, 2] }), /^pagedAttention: queryStarts must run from 0 to the number of tokens \(3\)/);
    expectOpError(attend({ starts: [0, 3, 2, 3], lens: [6, 3, 3], tables: [[2, 0], [1, -1], [1, -1]] }), /^pagedAttention: sequence 1 has -1 new tokens/);
    expectOpError(attend({ starts: [0, 3] }), /^pagedAttention: queryStarts \(\[sequences \+ 1\]\) must be \[3\]/);
  });

  it('shapes', () => {
    expectOpError(attend({ out: addon.empty('f32', [3, 4]) }), /^pagedAttention: out \(\[tokens, numHeads \* headDim\]\) must be \[3, 8\]/);
    expectOpError(attend({ kc: addon.zeros('f32', [3, 0, 1, 4]) }), /^pagedAttention: kCache .* block size/);
    expectOpError(
      () => addon.pagedAttention(out, qkv, k, v, i32([2, 2], [0, 0, 0, 0]), i32([3], [0, 2, 3]), f32([2], [6, 3]), 2, 1, 4, 0.5),
      /^pagedAttention: contextLens must be i32/,
    );
    expectOpError(
      () => addon.pagedAttention(out, qkv, k, v, i32([2, 2], [0, 0, 0, 0]), i32([3], [0, 2, 3]), i32([2], [6, 3]), 2, 1, 4, 'x' as never),
      /^pagedAttention: scale must be a number/,
    );
  });
});
