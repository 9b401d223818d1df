// The row and element ops on CUDA against the CPU backend: embedding, the norms, linear
// (GEMV, tiled and cuBLASLt paths), rope, siluMul, add, gatherRows.
import { describe, expect, it } from 'vitest';

import {
  ACTS, addon, describeGpu, expectClose, floats, i32, onCpu, onCuda, Rng, rounded, tol, WEIGHT_DTYPES, weightPair,
  type Act, type Tensor,
} from './helpers.js';

/** Runs `op` on the CPU (f32) and on CUDA (act), returns both outputs as f32. */
function both(act: Act, shape: number[], op: (dev: 'cpu' | 'cuda', out: Tensor) => void): [Float32Array, Float32Array] {
  const cpu = addon.empty('f32', shape);
  const cuda = addon.empty(act, shape, 'cuda');
  op('cpu', cpu);
  op('cuda', cuda);
  return [floats(cuda), floats(cpu)];
}

/** The same activation values on both devices (rounded to act for both). */
function act2(act: Act, shape: number[], data: Float32Array) {
  const v = rounded(act, data);
  return { cpu: onCpu(shape, v), cuda: onCuda(act, shape, v), values: v };
}

describeGpu('cuda row ops', () => {
  describe.each(ACTS)('%s activations', (act) => {
    it.each(WEIGHT_DTYPES)('embedding, %s table', (wd) => {
      for (const dim of [1, 7, 130, 1024]) {
        const rng = new Rng(dim);
        const table = weightPair(wd, [50, dim], rng.floats(50 * dim));
        const ids = rng.ints(37, 0, 50);
        const [got, want] = both(act, [37, dim], (dev, out) =>
          addon.embedding(out, dev === 'cpu' ? table.cpu : table.cuda, dev === 'cpu' ? i32([37], ids) : onCuda('i32', [37], ids)));
        expectClose(got, want, tol(act, false));
      }
    });

    describe.each(WEIGHT_DTYPES)('%s norm weights', (wd) => {
      /** rmsNorm of random rows on both backends, checked; its inputs for more. */
      const checkRmsNorm = (rows: number, dim: number, seed: number) => {
        const rng = new Rng(seed);
        const w = weightPair(wd, [dim], rng.floats(dim, 0.5, 1.5));
        const x = act2(act, [rows, dim], rng.floats(rows * dim, -3, 3));
        const [got, want] = both(act, [rows, dim], (dev, out) => addon.rmsNorm(out, x[dev], w[dev], 1e-6));
        expectClose(got, want, tol(act, true));
        return { rng, w, x };
      };

      // Past 4096, addRmsNorm's threads take two or four runs of 8 each (blocks of at most 512).
      it.each([1, 7, 33, 130, 4096, 5120, 8192, 12288])('rmsNorm and addRmsNorm, width %i', (dim) => {
        const rows = 5;
        const { rng, w, x } = checkRmsNorm(rows, dim, dim + 1);
        const res = act2(act, [rows, dim], rng.floats(rows * dim, -3, 3));
        const resCpu = onCpu([rows, dim], res.values);
        const resCuda = onCuda(act, [rows, dim], res.values);
        const [got2, want2] = both(act, [rows, dim], (dev, out) =>
          addon.addRmsNorm(dev === 'cpu' ? resCpu : resCuda, x[dev], w[dev], 1e-5, out));
        expectClose(got2, want2, tol(act, true));
        expectClose(floats(resCuda), floats(resCpu), tol(act, false));
      });

      // From 256 rows warps take rows in turn (widths that are whole runs of 256 and fit a
      // lane's registers); 2560 leaves a lane's last runs empty, and 9000 rows are more than an
      // H200's blocks hold at once (132 SMs x 16 blocks x 4 warps: 8448), so that warps take
      // several rows.
      it.each([[300, 256], [300, 1024], [300, 2560], [300, 4096], [9000, 1024]])('rmsNorm of prefill-sized steps, %i rows of %i', (rows, dim) => {
        checkRmsNorm(rows, dim, dim + 2);
      });

      it.each([[4, 2, 8], [3, 1, 33], [16, 8, 128], [8, 2, 256]])('headRmsNorm, %i q heads, %i kv heads, headDim %i', (h, kv, hd) => {
        const rng = new Rng(h * kv * hd);
        const n = 9;
        const width = (h + 2 * kv) * hd;
        const data = rounded(act, rng.floats(n * width, -2, 2));
        const qw = weightPair(wd, [hd], rng.floats(hd, 0.5, 1.5));
        const kw = weightPair(wd, [hd], rng.floats(hd, 0.5, 1.5));
        const cpu = onCpu([n, width], data);
        const cuda = onCuda(act, [n, width], data);
        addon.headRmsNorm(cpu, qw.cpu, kw.cpu, h, kv, hd, 1e-6);
        addon.headRmsNorm(cuda, qw.cuda, kw.cuda, h, kv, hd, 1e-6);
        expectClose(floats(cuda), floats(cpu), tol(act, true));
      });
    });

    describe.each(WEIGHT_DTYPES)('linear, %s weights', (wd) => {
      // [n, in, out]: GEMV sizes (1, <= 4), past it (tiled / cuBLASLt), odd and aligned widths;
      // narrow outputs over long rows, where 2 to 8 warps share an output feature; bf16 rows
      // the tensor-core GEMV takes (2-4 of a weight of 32 MiB or more; of a smaller one 1 to
      // 16 where out > in, 32 where out <= in: one, two and four groups of 8 rows, x through
      // L1 and through the ring), outputs past its 16-row tiles.
      const shapes = [[1, 7, 33], [1, 64, 256], [1, 1024, 130], [3, 130, 33], [4, 64, 64], [5, 1024, 256],
        [16, 64, 33], [17, 130, 256], [64, 1024, 512], [70, 64, 33], [256, 2048, 1024],
        [1, 64, 4227], [5, 130, 4229], [16, 1024, 4230], [1, 2048, 1024], [4, 3072, 1000], [2, 3000, 77], [1, 1024, 4096],
        [2, 4096, 4100], [4, 4096, 4104], [8, 512, 100], [16, 2048, 1040], [2, 256, 17], [12, 1024, 200],
        [12, 256, 1000], [16, 512, 3000], [24, 2048, 300], [32, 1024, 1000], [3, 4608, 4400]];
      it.each(shapes)('n %i, in %i, out %i', (n, inF, outF) => {
        const rng = new Rng(n * 7 + inF * 3 + outF);
        const w = weightPair(wd, [outF, inF], rng.floats(outF * inF));
        const bias = weightPair(wd, [outF], rng.floats(outF));
        const x = act2(act, [n, inF], rng.floats(n * inF));
        for (const b of [null, bias]) {
          const [got, want] = both(act, [n, outF], (dev, out) => addon.linear(out, x[dev], w[dev], b ? b[dev] : null));
          expectClose(got, want, tol(act, true));
        }
        // accumulate: out += x · wᵀ + bias (the residual stream taking a projection).
        const base = rounded(act, rng.floats(n * outF));
        const acc = { cpu: onCpu([n, outF], base), cuda: onCuda(act, [n, outF], base) };
        addon.linear(acc.cpu, x.cpu, w.cpu, bias.cpu, true);
        addon.linear(acc.cuda, x.cuda, w.cuda, bias.cuda, true);
        expectClose(floats(acc.cuda), floats(acc.cpu), tol(act, true));
      });
    });

    // bf16 over 32 MiB: the tensor-core GEMV from 2 to 4 rows, then cuBLASLt; under it, 1 to
    // 16 (out > in) or 32 (out <= in)
    it.each([[1, 4096, 4200], [1, 1024, 300], [2, 4096, 4200], [3, 4096, 4200], [4, 4096, 4200], [5, 4096, 4200], [8, 1024, 300], [13, 1024, 300],
      [13, 512, 1000], [24, 1024, 300]])(
      'linear, %i rows of in %i, out %i, by a window of a wider weight (its columns from wCol)', (n, inF, outF) => {
      const rng = new Rng(100 + n);
      const width = inF + 40;
      const w = weightPair('bf16', [outF, width], rng.floats(outF * width));
      const x = act2(act, [n, inF], rng.floats(n * inF));
      for (const wCol of [0, 8, 40]) {
        const [got, want] = both(act, [n, outF], (dev, out) => addon.linear(out, x[dev], w[dev], null, false, wCol));
        expectClose(got, want, tol(act, true));
      }
    });

    // An extended projection (`from` outputs, then 4 slots' shrink rows of perSlot each) naming
    // its slot layout: every output a row's own slot needs matches the CPU; the rows of slots no
    // row holds, slot 0 among them, are left unwritten by the tensor-core GEMV (bf16 at decode
    // sizes) where they fill whole blocks of 16 (perSlot 48), x through its ring (in 1024) or not
    // (256), and by the one-row GEMV (f32, or a bf16 weight of 32 MiB or more) where they fill
    // whole blocks of 8. A slot past the table (7, which the kernels guard against) takes none of
    // the blocks of the slots after it.
    const manySlots = Array.from({ length: 32 }, (_, i) => [3, 0, 2, 3][i % 4]);
    it.each([
      [1, 48, [2], 1024, 512], [3, 48, [1, 0, 1], 1024, 512], [2, 48, [3, 1], 256, 512], [8, 24, [3, 0, 3, 1, 1, 0, 0, 3], 1024, 512],
      [8, 48, [3, 0, 3, 1, 1, 0, 0, 3], 1024, 512], [16, 48, Array(16).fill(0), 1024, 512], [32, 48, manySlots, 1024, 512],
      [1, 48, [3], 4096, 4096], [1, 16, [0], 4096, 4096], [1, 24, [1], 512, 512], [4, 16, [3, 0, 3, 1], 4096, 4096],
      [5, 48, [7, 3, 1, 2, 3], 1024, 512],
    ])('linear of an extended projection, %i rows, %i shrink rows a slot, rows\' slots %j, in %i, %i outputs before them', (n, perSlot, rowSlots, inF, from) => {
      const rng = new Rng(300 + n + perSlot);
      const outF = from + 4 * perSlot;
      const w = weightPair('bf16', [outF, inF], rng.floats(outF * inF, -0.05, 0.05));
      const x = act2(act, [n, inF], rng.floats(n * inF));
      const want = addon.empty('f32', [n, outF]);
      addon.linear(want, x.cpu, w.cpu, null);
      const sentinel = 7;
      const got = onCuda(act, [n, outF], new Float32Array(n * outF).fill(sentinel));
      addon.linear(got, x.cuda, w.cuda, null, false, 0, onCuda('i32', [n], rowSlots), from, perSlot);
      const used = new Set(rowSlots.filter((s) => s > 0));
      const slotOf = (c: number) => Math.floor((c - from) / perSlot);
      const needed = (c: number) => c < from || used.has(slotOf(c));
      const pick = (v: Float32Array, keep: (c: number) => boolean) => v.filter((_, i) => keep(i % outF));
      expectClose(pick(floats(got), needed), pick(floats(want), needed), tol(act, true));
      const oneRowGemv = n === 1 && (act === 'f32' || outF * inF * 2 >= 32 << 20);
      if (oneRowGemv ? perSlot % 8 === 0 : act === 'bf16' && perSlot % 16 === 0)
        expect(pick(floats(got), (c) => !needed(c)).every((v) => v === sentinel)).toBe(true);
    });

    it('linear at decode sizes with cuBLASLt\'s algorithm chosen by timing (gemmTuning), as a graph warm-up does', () => {
      const rng = new Rng(77);
      for (const [n, inF, outF] of [[5, 4096, 4104], [33, 1024, 520], [64, 1024, 4104]]) {  // cuBLASLt's sizes
        const w = weightPair('bf16', [outF, inF], rng.floats(outF * inF));
        const x = act2(act, [n, inF], rng.floats(n * inF));
        addon.gemmTuning(true);
        try {
          const [got, want] = both(act, [n, outF], (dev, out) => addon.linear(out, x[dev], w[dev], null));
          expectClose(got, want, tol(act, true));
        } finally {
          addon.gemmTuning(false);
        }
        // The shape's choice is kept: the same product again, tuning off.
        const [again, want] = both(act, [n, outF], (dev, out) => addon.linear(out, x[dev], w[dev], null));
        expectClose(again, want, tol(act, true));
      }
    });

    it('linear at prefill sizes: row counts that share a bucket\'s plan, in an order that resizes it each time', () => {
      // 65..80 are one bucket (80), 257..320 another (320), 3073..4096 another (4096); each
      // count, plain and accumulating, against the CPU after the plan last ran another count.
      const rng = new Rng(78);
      const inF = 256, outF = 264;
      const w = weightPair('bf16', [outF, inF], rng.floats(outF * inF));
      for (const n of [80, 65, 79, 80, 72, 300, 257, 320, 4000, 3073, 4096]) {
        const x = act2(act, [n, inF], rng.floats(n * inF));
        const [got, want] = both(act, [n, outF], (dev, out) => addon.linear(out, x[dev], w[dev], null));
        expectClose(got, want, tol(act, true));
        const base = rounded(act, rng.floats(n * outF));
        const acc = { cpu: onCpu([n, outF], base), cuda: onCuda(act, [n, outF], base) };
        addon.linear(acc.cpu, x.cpu, w.cpu, null, true);
        addon.linear(acc.cuda, x.cuda, w.cuda, null, true);
        expectClose(floats(acc.cuda), floats(acc.cpu), tol(act, true));
      }
    });

    it('linear on views that start anywhere (no vector loads there)', () => {
      const rng = new Rng(3);
      const inF = 64, outF = 40, n = 3;
      const flatW = rng.floats(outF * inF + 3);
      const wCpu = addon.fromArray('bf16', [outF * inF + 3], flatW);
      const w = { cpu: wCpu.narrow(3, outF * inF).view([outF, inF]), cuda: wCpu.to('cuda').narrow(3, outF * inF).view([outF, inF]) };
      const xs = rounded(act, rng.floats(n * inF + 1));
      const x = { cpu: onCpu([n * inF + 1], xs).narrow(1, n * inF).view([n, inF]), cuda: onCuda(act, [n * inF + 1], xs).narrow(1, n * inF).view([n, inF]) };
      for (const rows of [1, 3]) {
        const [got, want] = both(act, [rows, outF], (dev, out) => addon.linear(out, x[dev].narrow(0, rows), w[dev], null));
        expectClose(got, want, tol(act, true));
      }
    });

    it.each([[4, 2, 8, 4], [2, 2, 64, 32], [8, 1, 128, 32], [3, 1, 33, 8]])('rope, %i q heads, %i kv heads, headDim %i, %i frequencies', (h, kv, hd, half) => {
      const rng = new Rng(h + kv + hd + half);
      const n = 11;
      const width = (h + 2 * kv) * hd;
      const data = rounded(act, rng.floats(n * width, -2, 2));
      const positions = rng.ints(n, 0, 8192);
      const inv = Float32Array.from({ length: half }, (_, i) => Math.pow(10000, (-2 * i) / (2 * half)));
      const cpu = onCpu([n, width], data);
      const cuda = onCuda(act, [n, width], data);
      addon.rope(cpu, i32([n], positions), onCpu([half], inv), h, kv, hd);
      addon.rope(cuda, onCuda('i32', [n], positions), onCuda('f32', [half], inv), h, kv, hd);
      expectClose(floats(cuda), floats(cpu), tol(act, false));
    });

    // The fused prologue gives what headRmsNorm + rope + kvWrite give on CUDA (up to the
    // compiler's choice of fused multiply-adds), and the CPU's values within tolerance;
    // padding slots (-1) and slots past the cache are skipped. From 32 rows, a block a token
    // (head dims 64, 128, 256; full and partial rotary), else the warp-per-head kernel.
    it.each([[4, 2, 8, 4, 9], [16, 8, 128, 64, 9], [3, 1, 33, 8, 9], [8, 2, 256, 128, 9], [2, 2, 64, 16, 9],
      [16, 8, 128, 64, 31], [16, 8, 128, 64, 32], [4, 2, 64, 32, 40], [8, 2, 256, 128, 64],
      [16, 8, 128, 64, 160], [4, 2, 64, 32, 130], [8, 2, 256, 128, 128], [4, 4, 128, 32, 150], [2, 2, 64, 16, 140],
      [3, 1, 33, 8, 140], [4, 2, 8, 4, 129]])(
      'ropeKvWrite, %i q heads, %i kv heads, headDim %i, %i frequencies, %i rows', (h, kv, hd, half, n) => {
        const rng = new Rng(7 * h + kv + hd + half + n);
        const blockSize = 4, numBlocks = n === 9 ? 5 : Math.ceil(n / blockSize);
        const capacity = numBlocks * blockSize;
        const width = (h + 2 * kv) * hd;
        const data = rounded(act, rng.floats(n * width, -2, 2));
        const positions = rng.ints(n, 0, 8192);
        // Each token its own slot, some padding (-1) and some past the cache.
        const slots = n === 9 ? [0, 19, -1, 7, 3, 100, 12, 1, 2]
          : Array.from({ length: n }, (_, i) => (i % 11 === 5 ? -1 : i % 13 === 7 ? capacity + i : (i * 11) % n));
        const inv = Float32Array.from({ length: half }, (_, i) => Math.pow(10000, (-2 * i) / (2 * half)));
        const qn = rng.floats(hd, 0.5, 1.5), kn = rng.floats(hd, 0.5, 1.5);
        for (const cacheDtype of ACTS) {
          for (const norms of [false, true]) {
            const cacheShape = [numBlocks, blockSize, kv, hd];
            const zeros = new Float32Array(numBlocks * blockSize * kv * hd);
            const run = (dev: 'cpu' | 'cuda', fused: boolean) => {
              const t = (dtype: Act | 'i32', shape: number[], d: ArrayLike<number>) =>
                dev === 'cpu' ? (dtype === 'i32' ? i32(shape, d) : onCpu(shape, d)) : onCuda(dtype, shape, d);
              const qkv = t(act, [n, width], data);
              const k = t(cacheDtype, cacheShape, zeros), v = t(cacheDtype, cacheShape, zeros);
              const pos = t('i32', [n], positions), sl = t('i32', [n], dev === 'cpu' ? slots.map((x) => (x >= capacity ? -1 : x)) : slots);
              const invT = t('f32', [half], inv);
              const qw = norms ? t('f32', [hd], qn) : null, kw = norms ? t('f32', [hd], kn) : null;
              if (fused) {
                addon.ropeKvWrite(qkv, pos, invT, k, v, sl, qw, kw, h, kv, hd, 1e-6);
              } else {
                if (qw && kw) addon.headRmsNorm(qkv, qw, kw, h, kv, hd, 1e-6);
                addon.rope(qkv, pos, invT, h, kv, hd);
                addon.kvWrite(k, v, qkv, sl, h, kv, hd);
              }
              return { qkv: floats(qkv), k: floats(k), v: floats(v) };
            };
            const fused = run('cuda', true), apart = run('cuda', false), cpu = run('cpu', true);
            const same = (a: Float32Array, b: Float32Array) => expectClose(a, b, act === 'f32' && cacheDtype === 'f32' ? 1e-6 : 4e-3);
            same(fused.qkv, apart.qkv);
            same(fused.k, apart.k);
            expect(fused.v).toEqual(apart.v);  // v is only copied
            expectClose(fused.qkv, cpu.qkv, tol(act, norms));
            expectClose(fused.k, rounded(cacheDtype, cpu.k), tol(act === 'bf16' || cacheDtype === 'bf16' ? 'bf16' : 'f32', norms));
            expectClose(fused.v, rounded(cacheDtype, cpu.v), tol(act === 'bf16' || cacheDtype === 'bf16' ? 'bf16' : 'f32', false));
          }
        }
      });

    // From 128 rows of a multiple of 8, a thread per 8 columns of a row.
    it.each([[1, 1], [3, 7], [17, 130], [64, 3000], [130, 3072], [200, 136], [150, 130]])('siluMul and add, %i rows of %i', (n, inter) => {
      const rng = new Rng(n * inter);
      const gu = act2(act, [n, 2 * inter], rng.floats(n * 2 * inter, -6, 6));
      const [got, want] = both(act, [n, inter], (dev, out) => addon.siluMul(out, gu[dev]));
      expectClose(got, want, tol(act, false));
      const a = act2(act, [n, inter], rng.floats(n * inter));
      const b = act2(act, [n, inter], rng.floats(n * inter));
      const [got2, want2] = both(act, [n, inter], (dev, out) => addon.add(out, a[dev], b[dev]));
      expectClose(got2, want2, tol(act, false));
    });

    it('gatherRows', () => {
      const rng = new Rng(8);
      const x = act2(act, [20, 130], rng.floats(20 * 130));
      const idx = rng.ints(9, 0, 20);
      const [got, want] = both(act, [9, 130], (dev, out) =>
        addon.gatherRows(out, x[dev], dev === 'cpu' ? i32([9], idx) : onCuda('i32', [9], idx)));
      expect(got).toEqual(want);
    });
  });
});
