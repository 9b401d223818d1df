// kvWrite and pagedAttention on CUDA against the CPU backend: prefill, chunked prefill
// and decode mixed in one call, shuffled non-contiguous block tables with padding, GQA
// group sizes 1 to 8, head dims from 8 to 256, f32 or bf16 activations and caches, and
// contexts long enough that decode splits the keys across blocks. Head dims 64, 128 and 256
// take the streaming kernel (f32 caches of 256 excepted), the others the general one; bf16
// steps with prefill tokens and head dim 64 or 128 the tensor-core kernel (wgmma on a Hopper
// GPU; bench/gpu_session.sh runs this file again with MSTAR_WGMMA=0 for the mma.sync one).
import { describe, expect, it } from 'vitest';

import { ACTS, addon, describeGpu, expectClose, expectSame, floats, i32, onCpu, onCuda, Rng, rounded, tol, type Act } from './helpers.js';

interface Seq {
  cached: number;
  fresh: number;
}
interface Layout {
  numHeads: number;
  numKvHeads: number;
  headDim: number;
}

/** Blocks from a shuffled pool with spares; columns past a sequence's last block are -1. */
function allocate(rng: Rng, seqs: Seq[], blockSize: number, spareColumns: number) {
  const needed = seqs.map((s) => Math.ceil((s.cached + s.fresh) / blockSize));
  const numBlocks = needed.reduce((a, b) => a + b, 0) + 3;
  const pool = rng.shuffle(Array.from({ length: numBlocks }, (_, i) => i));
  const maxBlocks = Math.max(...needed) + spareColumns;
  const tables = needed.map((count) => [...pool.splice(0, count), ...new Array(maxBlocks - count).fill(-1)]);
  const slot = (s: number, pos: number) => tables[s][Math.floor(pos / blockSize)] * blockSize + (pos % blockSize);
  return { numBlocks, maxBlocks, tables, slot };
}

/**
 * One engine step on a device: the cached tokens are written first, then the fresh ones,
 * then attention of the fresh tokens. Returns the output and the caches.
 */
function step(dev: 'cpu' | 'cuda', act: Act, cacheDtype: Act, seqs: Seq[], blockSize: number, l: Layout, seed: number, spareColumns: number) {
  const rng = new Rng(seed);
  const width = (l.numHeads + 2 * l.numKvHeads) * l.headDim;
  const { numBlocks, maxBlocks, tables, slot } = allocate(rng, seqs, blockSize, spareColumns);
  const oldTokens = seqs.reduce((a, s) => a + s.cached, 0);
  const newTokens = seqs.reduce((a, s) => a + s.fresh, 0);
  // Values rounded to bf16 whenever either side stores bf16, so both backends see the same.
  const round = (v: Float32Array) => (act === 'bf16' || cacheDtype === 'bf16' ? rounded('bf16', v) : v);
  const oldQkv = round(rng.floats(oldTokens * width, -2, 2));
  const newQkv = round(rng.floats(newTokens * width, -2, 2));
  const oldSlots = seqs.flatMap((s, i) => Array.from({ length: s.cached }, (_, p) => slot(i, p)));
  const newSlots = seqs.flatMap((s, i) => Array.from({ length: s.fresh }, (_, p) => slot(i, s.cached + p)));
  const cacheShape = [numBlocks, blockSize, l.numKvHeads, l.headDim];
  const nan = new Float32Array(numBlocks * blockSize * l.numKvHeads * l.headDim).fill(NaN);
  const actT = dev === 'cpu' ? 'f32' : act;
  const cT = dev === 'cpu' ? 'f32' : cacheDtype;
  const tensor = (dtype: 'f32' | 'bf16' | 'i32', shape: number[], data: ArrayLike<number>) =>
    dev === 'cpu' ? (dtype === 'i32' ? i32(shape, data) : onCpu(shape, data)) : onCuda(dtype, shape, data);
  const k = tensor(cT, cacheShape, nan);
  const v = tensor(cT, cacheShape, nan);
  const { numHeads: h, numKvHeads: kv, headDim: hd } = l;
  if (oldTokens > 0) addon.kvWrite(k, v, tensor(actT, [oldTokens, width], oldQkv), tensor('i32', [oldTokens], oldSlots), h, kv, hd);
  const qkv = tensor(actT, [newTokens, width], newQkv);
  addon.kvWrite(k, v, qkv, tensor('i32', [newTokens], newSlots), h, kv, hd);
  const starts = [0];
  for (const s of seqs) starts.push(starts[starts.length - 1] + s.fresh);
  const out = dev === 'cpu' ? addon.empty('f32', [newTokens, h * hd]) : addon.empty(act, [newTokens, h * hd], 'cuda');
  addon.pagedAttention(out, qkv, k, v, tensor('i32', [seqs.length, maxBlocks], tables.flat()),
    tensor('i32', [seqs.length + 1], starts), tensor('i32', [seqs.length], seqs.map((s) => s.cached + s.fresh)),
    h, kv, hd, 1 / Math.sqrt(hd));
  return { out: floats(out), k: floats(k), v: floats(v) };
}

const LAYOUTS: Layout[] = [
  { numHeads: 4, numKvHeads: 2, headDim: 8 },     // 2 q heads per kv head, dims below a warp
  { numHeads: 12, numKvHeads: 4, headDim: 33 },   // 3 per kv head: one head a block, odd dims
  { numHeads: 8, numKvHeads: 2, headDim: 64 },    // 4 per kv head, 2 dims a lane, wide loads
  { numHeads: 2, numKvHeads: 2, headDim: 96 },    // no grouping, dims not a lane multiple
  { numHeads: 24, numKvHeads: 8, headDim: 128 },  // 3 per kv head in one block (Llama-3.2-3B)
  { numHeads: 10, numKvHeads: 2, headDim: 128 },  // 5 (Qwen3-14B's 40 / 8)
  { numHeads: 12, numKvHeads: 2, headDim: 64 },   // 6
  { numHeads: 16, numKvHeads: 2, headDim: 128 },  // 8 per kv head
  { numHeads: 32, numKvHeads: 2, headDim: 128 },  // 16 per kv head: two blocks share a kv head
  { numHeads: 8, numKvHeads: 4, headDim: 256 },   // Qwen3.5's head dim
];

// [name, sequences, block size, table columns past the longest sequence's blocks]
const BATCHES: [string, Seq[], number, number?][] = [
  ['prefill', [{ cached: 0, fresh: 5 }, { cached: 0, fresh: 17 }, { cached: 0, fresh: 1 }], 4],
  ['chunked prefill on cached blocks', [{ cached: 8, fresh: 5 }, { cached: 3, fresh: 9 }], 16],
  ['decode', [{ cached: 30, fresh: 1 }, { cached: 7, fresh: 1 }, { cached: 100, fresh: 1 }], 16],
  ['mixed, with an idle sequence', [{ cached: 0, fresh: 13 }, { cached: 20, fresh: 7 }, { cached: 9, fresh: 0 }, { cached: 64, fresh: 1 }, { cached: 5, fresh: 1 }], 5],
  ['block size 1', [{ cached: 6, fresh: 3 }, { cached: 0, fresh: 4 }], 1],
  ['long decode, split across blocks', [{ cached: 3000, fresh: 1 }, { cached: 1500, fresh: 1 }, { cached: 40, fresh: 1 }], 16],
  ['long prefill chunk', [{ cached: 1200, fresh: 40 }], 32],
  // bf16 steps with prefill go to tensor cores, in tiles of 64 or 128 query tokens and keys.
  ['prefill over several query tiles', [{ cached: 0, fresh: 150 }, { cached: 70, fresh: 65 }, { cached: 0, fresh: 2 }, { cached: 200, fresh: 1 }], 16],
  // A captured decode graph's table is as wide as the longest context allowed: contexts in
  // it split across blocks by their own lengths (where that takes 4 rounds off the block's
  // loop: 300 and 700 keys split, 2 and 33 never do).
  ['short decode in a wide table', [{ cached: 170, fresh: 1 }, { cached: 2, fresh: 1 }, { cached: 33, fresh: 1 }, { cached: 700, fresh: 1 }, { cached: 300, fresh: 1 }], 16, 2000],
  // More (token, kv head) blocks than an H200's 132 SMs with 8 kv heads: the streaming
  // kernel's narrow blocks, split where the GPU has room (the cases above take wide ones).
  ['many decode sequences', Array.from({ length: 40 }, (_, i) => ({ cached: 30 + ((i * 37) % 130), fresh: 1 })), 16],
];

describeGpu('cuda paged attention', () => {
  describe.each(LAYOUTS)('$numHeads q heads, $numKvHeads kv heads, headDim $headDim', (l) => {
    describe.each(ACTS)('%s activations', (act) => {
      it.each(BATCHES)('%s', (_name, seqs, blockSize, spareColumns = 1) => {
        for (const cacheDtype of ACTS) {
          const seed = l.numHeads * 1000 + l.headDim + blockSize;
          const want = step('cpu', act, cacheDtype, seqs, blockSize, l, seed, spareColumns);
          const got = step('cuda', act, cacheDtype, seqs, blockSize, l, seed, spareColumns);
          // The caches hold the same values (NaN where never written).
          expectSame(got.k, rounded(cacheDtype, want.k));
          expectSame(got.v, rounded(cacheDtype, want.v));
          expectClose(got.out, want.out, tol(act, true));
        }
      });
    });
  });
});

// The tensor-core prefill against the same step in f32 activations (the streaming kernel,
// whose output is not rounded). The weights P are rounded once to bf16 (as FlashAttention
// does): each within 2^-9 of itself, so the output moves by at most 2^-9 of the weighted mean
// of |v| (|v| <= 2 here), and its own rounding adds 2^-9 of its size. Most elements (two
// thirds measured) are still exactly the f32 result rounded.
describeGpu('cuda prefill attention on tensor cores', () => {
  // Block sizes: 16 (the default), 128 (a tile's keys inside one cache block), 8 (many blocks
  // a tile) and 24 (not a power of two: a key's block found by division). The last two cases'
  // contexts pass the tile buffers' count (3 of 128 keys on sm_90a): their barriers' phases.
  it.each([
    [{ numHeads: 4, numKvHeads: 2, headDim: 64 }, [{ cached: 0, fresh: 150 }, { cached: 40, fresh: 30 }, { cached: 0, fresh: 33 }], 16],
    [{ numHeads: 16, numKvHeads: 8, headDim: 128 }, [{ cached: 0, fresh: 200 }, { cached: 100, fresh: 64 }], 16],
    [{ numHeads: 16, numKvHeads: 8, headDim: 128 }, [{ cached: 0, fresh: 200 }, { cached: 100, fresh: 64 }], 128],
    [{ numHeads: 4, numKvHeads: 2, headDim: 64 }, [{ cached: 13, fresh: 77 }, { cached: 0, fresh: 129 }], 8],
    [{ numHeads: 4, numKvHeads: 2, headDim: 128 }, [{ cached: 0, fresh: 150 }, { cached: 50, fresh: 70 }], 24],
    [{ numHeads: 4, numKvHeads: 2, headDim: 128 }, [{ cached: 0, fresh: 700 }, { cached: 300, fresh: 260 }], 16],
    [{ numHeads: 4, numKvHeads: 2, headDim: 64 }, [{ cached: 100, fresh: 530 }], 32],
  ] as [Layout, Seq[], number][])('%o, block size %i', (l, seqs, blockSize) => {
    const ref = step('cuda', 'f32', 'bf16', seqs, blockSize, l, 11, 1).out;
    const got = step('cuda', 'bf16', 'bf16', seqs, blockSize, l, 11, 1).out;
    const best = rounded('bf16', ref);
    let exact = 0;
    for (let i = 0; i < got.length; i++) {
      if (got[i] === best[i]) exact++;
      const bound = 2 ** -9 * (2 + Math.abs(ref[i])) * (1 + 2 ** -10);
      if (!(Math.abs(got[i] - ref[i]) <= bound)) expect.fail(`element [${i}]: got ${got[i]}, want ${ref[i]} within ${bound}`);
    }
    expect(exact / got.length).toBeGreaterThanOrEqual(0.5);
    expectClose(got, ref, 2 ** -8);
  });
});
