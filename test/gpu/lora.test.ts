// LoRA shrink and expand on CUDA against the CPU backend, with mixed slots (slot 0 rows
// get nothing, some slots have no rows, rows of one slot not contiguous), fused slices
// of different widths, every weight dtype; and the slot-loading helpers on CUDA.
import { describe, expect, it } from 'vitest';

import {
  ACTS, addon, describeGpu, expectClose, expectSame, floats, i32, onCpu, onCuda, Rng, rounded, tol, WEIGHT_DTYPES,
  weightPair,
} from './helpers.js';

const NUM_SLOTS = 5;

describeGpu('cuda lora', () => {
  describe.each(ACTS)('%s activations', (act) => {
    describe.each(WEIGHT_DTYPES)('%s adapters', (wd) => {
      // [rows, in, slice widths, rank]
      const cases: [number, number, number[], number][] = [
        [1, 7, [5], 4],
        [6, 64, [16, 8, 16], 8],
        [33, 130, [40, 24, 24], 16],
        [64, 1024, [256], 64],
        [20, 132, [24, 8], 4],  // 132 = 8k + 4: f32 rows 16-byte aligned, yet not whole runs of 8
      ];
      it.each(cases)('%i rows, in %i, slices %j, rank %i', (n, inF, widths, rank) => {
        const rng = new Rng(n + inF + rank + wd.length + act.length);
        const numSlices = widths.length;
        const outF = widths.reduce((a, b) => a + b, 0);
        const starts = [0];
        for (const w of widths) starts.push(starts[starts.length - 1] + w);
        // Slots 0..4, never slot 2 (an empty segment), slot 0 included when n > 1.
        const slots = Array.from({ length: n }, (_, r) => [0, 1, 3, 4][(r * 7 + 3) % 4]);
        const a = weightPair(wd, [NUM_SLOTS, numSlices * rank, inF], rng.floats(NUM_SLOTS * numSlices * rank * inF));
        const b = weightPair(wd, [outF, NUM_SLOTS, numSlices * rank], rng.floats(NUM_SLOTS * outF * numSlices * rank));
        const x = rounded(act, rng.floats(n * inF));

        const tCpu = addon.empty('f32', [n, numSlices * rank]);
        const tCuda = addon.empty(act, [n, numSlices * rank], 'cuda');
        addon.loraShrink(tCpu, onCpu([n, inF], x), a.cpu, i32([n], slots));
        addon.loraShrink(tCuda, onCuda(act, [n, inF], x), a.cuda, onCuda('i32', [n], slots));
        expectClose(floats(tCuda), floats(tCpu), tol(act, true));

        // Expand from the same t on both devices, onto the same base output.
        const t = rounded(act, floats(tCpu));
        const base = rounded(act, rng.floats(n * outF));
        const outCpu = onCpu([n, outF], base);
        const outCuda = onCuda(act, [n, outF], base);
        addon.loraExpand(outCpu, onCpu([n, numSlices * rank], t), b.cpu, i32([n], slots), Int32Array.from(starts));
        addon.loraExpand(outCuda, onCuda(act, [n, numSlices * rank], t), b.cuda, onCuda('i32', [n], slots),
          Int32Array.from(starts));
        const got = floats(outCuda);
        expectClose(got, floats(outCpu), tol(act, true));
        for (let r = 0; r < n; ++r)
          if (slots[r] === 0) expectSame(got.subarray(r * outF, (r + 1) * outF), base.subarray(r * outF, (r + 1) * outF));
      });
    });
  });

  // The shrink's layouts (a block per rank row of each row while rows × rank rows stay within
  // twice the SMs; else up to 64 rows a block per few rank rows; past that, tiles of rows),
  // narrow and into wide rows through [W | b over every slot] (linear and linearWide), and
  // linearExpand, plain and accumulating (the expand in the GEMV epilogue up to 4 rows, linear
  // + loraExpand above; accumulating, the adapter's delta joins the projection first), against
  // the CPU and against the separate CUDA ops (within rounding).
  describe.each(ACTS)('fused, %s activations', (act) => {
    // [rows, in, slice widths, rank]: GEMV rows 1 and 3, then cuBLASLt / tiled.
    const cases: [number, number, number[], number][] = [
      [1, 1024, [512, 256, 256], 16],
      [3, 136, [40, 24, 24], 8],
      [11, 256, [128, 128], 64],  // 1408 rank rows: a block per few
      [24, 256, [128], 8],  // 192: by block at 24 rows
      [2, 4096, [64, 32], 16],  // by block, long rows
      [1, 8192, [128], 8],
      [64, 256, [128, 64, 64], 16],  // 64 rows of 6 blocks of 8 rank rows
      [16, 64, [96], 4],
      [40, 512, [256, 128, 128], 16],
      [100, 256, [128, 64], 8],  // tiles of rows
      [48, 12800, [64, 32], 8],
      [5, 132, [64], 8],  // 132 = 8k + 4: no 8-element runs (by block)
      [40, 132, [64, 32], 8],  // the same, a block per few rank rows
      [40, 12288, [64], 8],
    ];
    it.each(cases)('%i rows, in %i, slices %j, rank %i', (n, inF, widths, rank) => {
      const rng = new Rng(3 * n + inF + rank + act.length);
      const numSlices = widths.length;
      const outF = widths.reduce((a, b) => a + b, 0);
      const starts = [0];
      for (const w of widths) starts.push(starts[starts.length - 1] + w);
      const slots = Array.from({ length: n }, (_, r) => [0, 1, 3, 4, 7][(r * 7 + 3) % 5]);  // 7: past the table, none
      const cpuSlots = slots.map((v) => (v >= NUM_SLOTS ? 0 : v));
      const R = numSlices * rank;
      const a = weightPair('bf16', [NUM_SLOTS, R, inF], rng.floats(NUM_SLOTS * R * inF, -0.1, 0.1));
      const b = weightPair('bf16', [outF, NUM_SLOTS, R], rng.floats(NUM_SLOTS * outF * R, -0.1, 0.1));
      const w = weightPair('bf16', [outF, inF], rng.floats(outF * inF, -0.05, 0.05));
      const bias = weightPair('bf16', [outF], rng.floats(outF));
      const xs = rounded(act, rng.floats(n * inF));
      const close = (got: Float32Array, want: Float32Array, reordered = true) => expectClose(got, want, tol(act, reordered));

      // The shrink alone, against the CPU's.
      const tCuda = addon.empty(act, [n, R], 'cuda'), tCpu = addon.empty('f32', [n, R]);
      addon.loraShrink(tCuda, onCuda(act, [n, inF], xs), a.cuda, onCuda('i32', [n], slots));
      addon.loraShrink(tCpu, onCpu([n, inF], xs), a.cpu, i32([n], cpuSlots));
      expectClose(floats(tCuda), floats(tCpu), 2 * tol(act, true));

      // Wide rows [x | every slot's shrink] (t null; loraShrink copying x in), against the
      // CPU's; then one linear through [W | b over every slot] against the CPU's, and the
      // projection alone reading W's columns of the wide weight.
      const width = inF + NUM_SLOTS * R;
      const wideCuda = () => {
        const out = addon.empty(act, [n, width], 'cuda');
        addon.loraShrink(out, onCuda(act, [n, inF], xs), a.cuda, onCuda('i32', [n], slots));
        return out;
      };
      const wideCpu = () => {
        const out = addon.empty('f32', [n, width]);
        addon.loraShrink(out, onCpu([n, inF], xs), a.cpu, i32([n], cpuSlots));
        return out;
      };
      // The pool's b: each output row's own slice only.
      const bVals = floats(b.cpu).map((v, i) => {
        const o = Math.floor(i / (NUM_SLOTS * R)), j = Math.floor((i % R) / rank);
        return o >= starts[j] && o < starts[j + 1] ? v : 0;
      });
      const wVals = floats(w.cpu), wideW = new Float32Array(outF * width);
      for (let o = 0; o < outF; o++) {
        wideW.set(wVals.subarray(o * inF, (o + 1) * inF), o * width);
        wideW.set(bVals.subarray(o * NUM_SLOTS * R, (o + 1) * NUM_SLOTS * R), o * width + inF);
      }
      const wideWeight = weightPair('bf16', [outF, width], wideW);
      const got = wideCuda(), want = wideCpu();
      expectClose(floats(got), floats(want), 2 * tol(act, true));
      const yCuda = addon.empty(act, [n, outF], 'cuda'), yCpu = addon.empty('f32', [n, outF]);
      addon.linear(yCuda, got, wideWeight.cuda, bias.cuda);
      addon.linear(yCpu, want, wideWeight.cpu, bias.cpu);
      expectClose(floats(yCuda), floats(yCpu), 2 * tol(act, true));
      // linearWide: up to 4 rows the GEMV reads only each row's own slot's columns of b.
      const yWide = addon.empty(act, [n, outF], 'cuda');
      addon.linearWide(yWide, got, wideWeight.cuda, bias.cuda, false, onCuda('i32', [n], slots), inF, NUM_SLOTS);
      expectClose(floats(yWide), floats(yCpu), 2 * tol(act, true));
      // loraJoin (a GEMM shrink's wide row): every slot's columns in s, each row keeping its own.
      const spread = rounded(act, rng.floats(n * NUM_SLOTS * R));
      const joinCuda = addon.empty(act, [n, width], 'cuda'), joinCpu = addon.empty('f32', [n, width]);
      addon.loraJoin(joinCuda, onCuda(act, [n, inF], xs), onCuda(act, [n, NUM_SLOTS * R], spread), onCuda('i32', [n], slots), NUM_SLOTS);
      addon.loraJoin(joinCpu, onCpu([n, inF], xs), onCpu([n, NUM_SLOTS * R], spread), i32([n], cpuSlots), NUM_SLOTS);
      expectSame(floats(joinCuda), floats(joinCpu));
      const plainCuda = addon.empty(act, [n, outF], 'cuda'), windowCuda = addon.empty(act, [n, outF], 'cuda');
      addon.linear(plainCuda, onCuda(act, [n, inF], xs), w.cuda, bias.cuda);
      addon.linear(windowCuda, onCuda(act, [n, inF], xs), wideWeight.cuda, bias.cuda, false, 0);
      expectSame(floats(windowCuda), floats(plainCuda));

      // linearExpand from the same x and t on both devices, onto the same base output.
      const ts = rounded(act, rng.floats(n * R, -1, 1)), base = rounded(act, rng.floats(n * outF));
      for (const accumulate of [false, true]) {
        const expand = (fusedOp: boolean) => {
          const out = onCuda(act, [n, outF], base);
          const x = onCuda(act, [n, inF], xs), t = onCuda(act, [n, R], ts);
          const sl = onCuda('i32', [n], slots), st = Int32Array.from(starts);
          if (fusedOp) {
            addon.linearExpand(out, x, w.cuda, bias.cuda, t, b.cuda, sl, st, accumulate);
          } else {  // the delta first (projection + adapter), then the sum, as transformers adds them
            const delta = addon.empty(act, [n, outF], 'cuda');
            addon.linear(delta, x, w.cuda, bias.cuda);
            addon.loraExpand(delta, t, b.cuda, sl, st);
            if (accumulate) addon.add(out, out, delta);
            else return floats(delta);
          }
          return floats(out);
        };
        const want = onCpu([n, outF], base);
        addon.linearExpand(want, onCpu([n, inF], xs), w.cpu, bias.cpu, onCpu([n, R], ts), b.cpu,
          i32([n], cpuSlots), Int32Array.from(starts), accumulate);
        close(expand(true), floats(want));
        close(expand(true), expand(false));
      }
    });
  });

  // slotRanks: adapters below the pool's rank are zero-padded and the kernels never read the
  // padding (NaN there changes nothing): every shrink and expand path, GEMV epilogue included.
  it.each([1, 3, 40])('slotRanks: %i rows, NaN padding unread, the CPU\'s zero-padded values', (n) => {
    const rng = new Rng(77 + n);
    const inF = 256, widths = [128, 64, 64], R = 8, S = widths.length, outF = 256;
    const starts = [0, 128, 192, 256];
    const ranks = [0, 0, 0, 2, 8, 5, 8, 0, 1, 8, 8, 8, 3, 3, 3];  // slots 0-4
    const slots = Array.from({ length: n }, (_, r) => [0, 1, 2, 3, 4][(r * 3 + 1) % 5]);
    const sliceOf = (o: number) => starts.findIndex((st, j) => j < S && o >= st && o < starts[j + 1]);
    const pad = (v: Float32Array, kOf: (i: number) => [number, number, number], fill: number) =>
      v.map((x, i) => { const [slot, s, k] = kOf(i); return k < ranks[slot * S + s] ? x : fill; });
    const aVals = rng.floats(NUM_SLOTS * S * R * inF, -0.1, 0.1), bVals = rng.floats(NUM_SLOTS * outF * S * R, -0.1, 0.1);
    const aKey = (i: number): [number, number, number] => { const k = Math.floor(i / inF) % (S * R); return [Math.floor(i / (inF * S * R)), Math.floor(k / R), k % R]; };
    // b [outF, slots, S * R]: an entry outside its row's slice reads as padding (k = R: never read).
    const bKey = (i: number): [number, number, number] => {
      const col = i % (S * R), s = sliceOf(Math.floor(i / (S * R * NUM_SLOTS)));
      return [Math.floor(i / (S * R)) % NUM_SLOTS, s, Math.floor(col / R) === s ? col % R : R];
    };
    const a = { nan: onCuda('bf16', [NUM_SLOTS, S * R, inF], pad(aVals, aKey, NaN)), zero: onCpu([NUM_SLOTS, S * R, inF], rounded('bf16', pad(aVals, aKey, 0))) };
    const b = { nan: onCuda('bf16', [outF, NUM_SLOTS, S * R], pad(bVals, bKey, NaN)), zero: onCpu([outF, NUM_SLOTS, S * R], rounded('bf16', pad(bVals, bKey, 0))) };
    const x = rounded('bf16', rng.floats(n * inF));
    const lw = rounded('bf16', rng.floats(outF * inF, -0.05, 0.05)), base = rounded('bf16', rng.floats(n * outF));
    const sr = onCuda('i32', [NUM_SLOTS, S], ranks);
    const sl = { cuda: onCuda('i32', [n], slots), cpu: i32([n], slots) };
    // The shrink.
    const tCuda = addon.empty('bf16', [n, S * R], 'cuda'), tCpu = addon.empty('f32', [n, S * R]);
    addon.loraShrink(tCuda, onCuda('bf16', [n, inF], x), a.nan, sl.cuda, sr);
    addon.loraShrink(tCpu, onCpu([n, inF], x), a.zero, sl.cpu);
    expectClose(floats(tCuda), floats(tCpu), 2 * tol('bf16', true));
    // Expands: alone, and in linear's epilogue, plain and accumulating.
    const ts = rounded('bf16', rng.floats(n * S * R, -1, 1));
    const st = Int32Array.from(starts);
    const e = onCuda('bf16', [n, outF], base);
    addon.loraExpand(e, onCuda('bf16', [n, S * R], ts), b.nan, sl.cuda, st, sr);
    const eWant = onCpu([n, outF], base);
    addon.loraExpand(eWant, onCpu([n, S * R], ts), b.zero, sl.cpu, st);
    expectClose(floats(e), floats(eWant), tol('bf16', true));
    for (const accumulate of [false, true]) {
      const got = onCuda('bf16', [n, outF], base);
      addon.linearExpand(got, onCuda('bf16', [n, inF], x), onCuda('bf16', [outF, inF], lw), null, onCuda('bf16', [n, S * R], ts), b.nan, sl.cuda, st, accumulate, sr);
      const want = onCpu([n, outF], base);
      addon.linearExpand(want, onCpu([n, inF], x), onCpu([outF, inF], lw), null, onCpu([n, S * R], ts), b.zero, sl.cpu, st, accumulate);
      expectClose(floats(got), floats(want), tol('bf16', true));
    }
  });

  it.each(WEIGHT_DTYPES.flatMap((d) => WEIGHT_DTYPES.map((s) => [d, s])))('copyRegion into %s from %s, plain and transposed', (dd, sd) => {
    const rng = new Rng(dd.length * 10 + sd.length);
    const dstData = rng.floats(20 * 30);
    const src = rng.floats(6 * 9);
    for (const transpose of [false, true]) {
      const cpu = addon.fromArray(dd, [20, 30], dstData);
      const cuda = addon.fromArray(dd, [20, 30], dstData, 'cuda');
      addon.copyRegion(cpu, addon.fromArray(sd, [6, 9], src), 3, 11, 0.5, transpose);
      addon.copyRegion(cuda, addon.fromArray(sd, [6, 9], src, 'cuda'), 3, 11, 0.5, transpose);
      expectSame(floats(cuda), floats(cpu));
      expect(addon.maxAbsDiff(cuda, cpu.to('cuda'))).toBe(0);
      expect(addon.maxAbsDiff(cuda, addon.fromArray(dd, [20, 30], dstData, 'cuda'))).toBe(addon.maxAbsDiff(cpu, addon.fromArray(dd, [20, 30], dstData)));
    }
  });
});
