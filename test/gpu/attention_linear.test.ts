// pagedAttentionLinear on CUDA against the CPU backend and against CUDA's pagedAttention then
// linear: where attention takes wide blocks (a decode step of few sequences) and the tensor-core
// GEMV takes the projection (bf16, n · in <= 4096), attention leaves the key splits of short
// contexts (at most 8 splits at one row of x a thread, 4 at two) as partials and the GEMV
// merges them (their rows of attn then untouched); longer contexts merge in attention (which
// split count a context takes depends on the GPU's SMs), and elsewhere the ops run one by one.
// Contexts of one split, a few, and many, alone and together; tables much wider than the
// contexts; a pool's widened W, a bias with accumulation, an extended weight's slots; eager, and
// replayed from a graph.
import { describe, expect, it } from 'vitest';

import { addon, describeGpu, expectClose, floats, i32, onCpu, onCuda, replayOnce, Rng, rounded, tol, type Act, type Tensor } from './helpers.js';

const BLOCK = 16, SENTINEL = 7, PER_SLOT = 16;

interface Layout {
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  outF: number;
}
interface Variant {
  spareColumns?: number;  // table columns past the longest context's blocks
  wider?: number;         // W's columns past attn's (a pool's b beside W)
  bias?: boolean;         // with accumulate: the residual stream's o
  slots?: number;         // an extended weight: every slot's PER_SLOT rows beneath W's outF
  act?: Act;
}

/** The step's inputs on both devices: a cache of random rows, shuffled tables, one query a sequence. */
function decodeInputs(rng: Rng, l: Layout, lens: number[], spareColumns: number, act: Act) {
  const width = (l.numHeads + 2 * l.numKvHeads) * l.headDim;
  const needed = lens.map((c) => Math.ceil(c / BLOCK));
  const numBlocks = needed.reduce((a, b) => a + b, 0) + 2;
  const pool = rng.shuffle(Array.from({ length: numBlocks }, (_, i) => i));
  const maxBlocks = Math.max(...needed) + spareColumns;
  const tables = needed.flatMap((count) => [...pool.splice(0, count), ...new Array(maxBlocks - count).fill(-1)]);
  const cacheShape = [numBlocks, BLOCK, l.numKvHeads, l.headDim];
  const cacheValues = () => rounded('bf16', rng.floats(numBlocks * BLOCK * l.numKvHeads * l.headDim, -2, 2));
  const [k, v] = [cacheValues(), cacheValues()];
  const qkv = rounded('bf16', rng.floats(lens.length * width, -2, 2));
  const n = lens.length;
  const on = (dev: 'cpu' | 'cuda') => {
    const float = (shape: number[], data: Float32Array, dtype: Act = act) => (dev === 'cpu' ? onCpu(shape, data) : onCuda(dtype, shape, data));
    const ints = (shape: number[], data: number[]) => (dev === 'cpu' ? i32(shape, data) : onCuda('i32', shape, data));
    return [float([n, width], qkv), float(cacheShape, k, 'bf16'), float(cacheShape, v, 'bf16'), ints([n, maxBlocks], tables),
      ints([n + 1], [...lens.keys(), n]), ints([n], lens)] as const;
  };
  return { cpu: on('cpu'), cuda: on('cuda') };
}

/** Whether the GEMV merges attention's splits (cuda/attention_linear.cu): bf16, wide blocks, n · in <= 4096. */
function merges(l: Layout, n: number, act: Act): boolean {
  return act === 'bf16' && [64, 128, 256].includes(l.headDim) && n * l.numHeads * l.headDim <= 4096;
}

/** The columns of each row a projection must write: W's, and an extended weight's row's own slot's. */
function written(out: Float32Array, rows: number, cols: number, outF: number, slotOf: number[]): number[] {
  const kept: number[] = [];
  for (let r = 0; r < rows; ++r)
    for (let c = 0; c < cols; ++c) {
      const slot = c < outF ? -1 : Math.floor((c - outF) / PER_SLOT);
      if (c < outF || (slotOf[r] > 0 && slot === slotOf[r])) kept.push(out[r * cols + c]);
    }
  return kept;
}

describeGpu('pagedAttentionLinear', () => {
  // Qwen3-0.6B's attention and o; Llama-3.2-1B's (head dim 64, 4 q heads a kv head); head dim
  // 256 (Qwen3.5); a 4096-wide input (Qwen3-8B's heads), whose GEMV merges 2 rows at most.
  describe.each([
    { numHeads: 16, numKvHeads: 8, headDim: 128, outF: 1024 }, { numHeads: 32, numKvHeads: 8, headDim: 64, outF: 2048 },
    { numHeads: 8, numKvHeads: 4, headDim: 256, outF: 1024 }, { numHeads: 32, numKvHeads: 8, headDim: 128, outF: 1024 },
  ])('$numHeads q heads, $numKvHeads kv heads, headDim $headDim, out $outF', (l) => {
    const inF = l.numHeads * l.headDim;
    const cases: [string, number[], Variant][] = [
      ['one short context (one split)', [40], {}],
      ['128 keys', [128], { bias: true }],
      ['192 keys, W wider', [192], { wider: 24 }],
      ['300 keys in a wide table', [300], { spareColumns: 125 }],
      ['2000 keys', [2000], {}],
      ['6000 keys', [6000], {}],
      ['2 rows, short and long, an extended weight', [170, 2000], { slots: 3 }],
      ['2 rows in a wide table, bias', [100, 7], { bias: true, spareColumns: 40 }],
      ['3 rows, an extended weight', [170, 2, 33], { slots: 3 }],
      ['4 rows, long and short, bias', [100, 5000, 7, 64], { bias: true, spareColumns: 40 }],
      ['2 rows, f32 activations', [200, 700], { act: 'f32' }],
    ];
    it.each(cases)('%s', (_name, lens, variant) => {
      const { spareColumns = 1, wider = 0, bias: withBias = false, slots = 0, act = 'bf16' } = variant;
      const rng = new Rng(lens.length * 1000 + l.headDim + l.numHeads + wider + slots);
      const n = lens.length, rows = l.outF + slots * PER_SLOT;
      const inputs = decodeInputs(rng, l, lens, spareColumns, act);
      const wValues = rng.floats(rows * (inF + wider), -0.05, 0.05);
      const w = { cpu: addon.fromArray('bf16', [rows, inF + wider], wValues) };
      const wCuda = w.cpu.to('cuda');
      const bias = withBias ? addon.fromArray('bf16', [rows], rng.floats(rows)) : null;
      const biasCuda = bias?.to('cuda') ?? null;
      const slotOf = lens.map((_, i) => i % (slots + 1));
      const unused = (dev: 'cpu' | 'cuda') =>
        slots ? ([dev === 'cpu' ? i32([n], slotOf) : onCuda('i32', [n], slotOf), l.outF, PER_SLOT] as const) : ([] as const);
      const start = rounded(act, rng.floats(n * rows, -1, 1));
      const layout = [l.numHeads, l.numKvHeads, l.headDim, 1 / Math.sqrt(l.headDim)] as const;

      const cpuOut = onCpu([n, rows], start);
      addon.pagedAttentionLinear(addon.empty('f32', [n, inF]), ...inputs.cpu, ...layout, cpuOut, w.cpu, bias, withBias, ...unused('cpu'));
      const want = written(floats(cpuOut), n, rows, l.outF, slotOf);

      const attn = onCuda(act, [n, inF], new Float32Array(n * inF).fill(SENTINEL));
      const out = onCuda(act, [n, rows], start);
      const slotArgs = unused('cuda');
      const step = () => addon.pagedAttentionLinear(attn, ...inputs.cuda, ...layout, out, wCuda, biasCuda, withBias, ...slotArgs);
      step();
      const got = written(floats(out), n, rows, l.outF, slotOf);
      expectClose(got, want, 2 * tol(act, true));
      // Rows of short contexts (at most 256 keys: 4 splits of 64) were left to the GEMV to merge.
      const attnRows = floats(attn);
      lens.forEach((len, r) => {
        const untouched = attnRows.subarray(r * inF, (r + 1) * inF).every((v) => v === SENTINEL);
        if (len <= 256) expect(untouched, `row ${r}: the GEMV merged its splits`).toBe(merges(l, n, act));
      });

      // The ops one by one on CUDA: the same to bf16's step (attention's own splits round attn).
      const apartAttn = addon.empty(act, [n, inF], 'cuda');
      const apart = onCuda(act, [n, rows], start);
      addon.pagedAttention(apartAttn, ...inputs.cuda, ...layout);
      addon.linear(apart, apartAttn, wCuda, biasCuda, withBias, 0, ...slotArgs);
      expectClose(got, written(floats(apart), n, rows, l.outF, slotOf), 2 * tol(act, true));

      // Replayed from a graph (the partials' buffer and the merge captured): the same again.
      out.copyFrom(start);
      replayOnce(step);
      expectClose(written(floats(out), n, rows, l.outF, slotOf), got, 1e-6);
      for (const t of [attn, out, apartAttn, apart, wCuda] as Tensor[]) t.dispose();
    });
  });
});
