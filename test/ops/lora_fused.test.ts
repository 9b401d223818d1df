// The LoRA ops beside the plain ones: wide rows [x | every slot's shrink] (loraShrink, and
// loraJoin from a shrink by every slot at once) through a weight with every slot's b beside
// W, linearExpand = linear (out += with accumulate) then loraExpand into its output, and the
// slots' ranks, on the CPU backend (the CUDA kernels are checked against these in
// test/gpu/lora.test.ts). Refused calls change nothing.
import { describe, expect, it } from 'vitest';

import { addon, expectClose, expectOpError, expectSame, f32, floats, i32 } from './helpers.js';
import { Rng } from './random.js';

const [n, dim, rank, numSlots] = [5, 12, 3, 4];
const widths = [6, 4, 4];  // three slices of one fused output, like q/k/v
const outF = widths.reduce((a, b) => a + b, 0);
const starts = [0, 6, 10, 14];
const slots = [0, 2, 3, 2, 1];

function data(seed: number) {
  const rng = new Rng(seed);
  return {
    res: rng.floats(n * dim), x: rng.floats(n * dim), w: rng.floats(dim, 0.5, 1.5), gateUp: rng.floats(n * 2 * dim, -4, 4),
    a: rng.floats(numSlots * widths.length * rank * dim), b: rng.floats(numSlots * outF * widths.length * rank),
    lw: rng.floats(outF * dim), bias: rng.floats(outF), t: rng.floats(n * widths.length * rank),
  };
}

describe('wide rows: [x | every slot\'s shrink]', () => {
  const R = 3 * rank, width = dim + numSlots * R;
  /** x, then each row's narrow t at its slot's R columns, zeros in the other slots' (as the ops document it). */
  const joined = (x: Float32Array, t: Float32Array) => {
    const out = new Float32Array(n * width);
    for (let r = 0; r < n; r++) {
      out.set(x.subarray(r * dim, (r + 1) * dim), r * width);
      out.set(t.subarray(r * R, (r + 1) * R), r * width + dim + slots[r] * R);
    }
    return out;
  };

  it('loraShrink makes x and the shrink in one wide row', () => {
    const d = data(7);
    const a = () => f32([numSlots, R, dim], d.a);
    const t = addon.empty('f32', [n, R]), wide = addon.empty('f32', [n, width]);
    addon.loraShrink(t, f32([n, dim], d.x), a(), i32([n], slots));
    addon.loraShrink(wide, f32([n, dim], d.x), a(), i32([n], slots));
    expectSame(floats(wide), joined(d.x, floats(t)));
    expect(floats(t).subarray(0, R).every((v) => v === 0)).toBe(true);  // slot 0: no adapter
  });

  it('through a weight with every slot\'s b beside W, one linear is the projection plus its adapter', () => {
    const d = data(8);
    // b [outF, slots, 3 * rank] as the pool holds it (each row's slice at its place, zeros elsewhere).
    const b = new Float32Array(outF * numSlots * R);
    for (let o = 0; o < outF; o++) {
      const j = starts.findIndex((s, i) => o >= s && o < starts[i + 1]);
      for (let slot = 1; slot < numSlots; slot++)
        for (let k = 0; k < rank; k++) b[(o * numSlots + slot) * R + j * rank + k] = d.b[(o * numSlots + slot) * R + j * rank + k];
    }
    const wideW = new Float32Array(outF * width);
    for (let o = 0; o < outF; o++) {
      wideW.set(d.lw.subarray(o * dim, (o + 1) * dim), o * width);
      wideW.set(b.subarray(o * numSlots * R, (o + 1) * numSlots * R), o * width + dim);
    }
    const t = addon.empty('f32', [n, R]), want = addon.empty('f32', [n, outF]);
    addon.loraShrink(t, f32([n, dim], d.x), f32([numSlots, R, dim], d.a), i32([n], slots));
    addon.linearExpand(want, f32([n, dim], d.x), f32([outF, dim], d.lw), f32([outF], d.bias), t, f32([outF, numSlots, R], b),
      i32([n], slots), Int32Array.from(starts));
    const wide = addon.empty('f32', [n, width]), got = addon.empty('f32', [n, outF]);
    addon.loraShrink(wide, f32([n, dim], d.x), f32([numSlots, R, dim], d.a), i32([n], slots));
    addon.linear(got, wide, f32([outF, width], wideW), f32([outF], d.bias));
    expectClose(floats(got), floats(want), 1e-5);
    const byWide = addon.empty('f32', [n, outF]);
    addon.linearWide(byWide, wide, f32([outF, width], wideW), f32([outF], d.bias), false, i32([n], slots), dim, numSlots);
    expectSame(floats(byWide), floats(got));
    // The base projection reads only W's columns of the wide weight; the expand alone only b's.
    const base = addon.empty('f32', [n, outF]), plain = addon.empty('f32', [n, outF]);
    addon.linear(base, f32([n, dim], d.x), f32([outF, width], wideW), null, false, 0);
    addon.linear(plain, f32([n, dim], d.x), f32([outF, dim], d.lw), null);
    expectSame(floats(base), floats(plain));
    const spread = addon.empty('f32', [n, numSlots * R]);
    addon.linear(spread, f32([n, dim], d.x), f32([numSlots * R, dim], d.a), null);
    const joined = addon.empty('f32', [n, width]);
    addon.loraJoin(joined, f32([n, dim], d.x), spread, i32([n], slots), numSlots);
    expectClose(floats(joined), floats(wide), 1e-6);  // the GEMM shrink's wide row: the per-row shrink's
    // A window of W's columns from wCol: b's columns, as b on its own.
    const window = addon.empty('f32', [n, outF]), own = addon.empty('f32', [n, outF]);
    addon.linear(window, spread, f32([outF, width], wideW), null, false, dim);
    addon.linear(own, spread, f32([outF, numSlots * R], b), null);
    expectSame(floats(window), floats(own));
  });

  it('refuse a wide row of the wrong width, and a weight window past its end, changing nothing', () => {
    const d = data(9);
    const a = f32([numSlots, R, dim], d.a), out = addon.zeros('f32', [n, width + 1]);
    expectOpError(() => addon.loraShrink(out, f32([n, dim], d.x), a, i32([n], slots)), /^loraShrink: t must be \[5, 9\]/);
    // x inside the wide row it would be copied into: the kernels would read what they write.
    const buf = addon.zeros('f32', [n * width]), xIn = buf.narrow(0, n * dim).view([n, dim]), tIn = buf.view([n, width]);
    expectOpError(() => addon.loraShrink(tIn, xIn, a, i32([n], slots)), /^loraShrink: x f32\[5, 12\] and t f32\[5, 48\] share memory/);
    expect(floats(buf).every((v) => v === 0)).toBe(true);
    expect(floats(out).every((v) => v === 0)).toBe(true);
    const y = addon.zeros('f32', [n, outF]);
    expectOpError(() => addon.linear(y, f32([n, dim], d.x), f32([outF, dim + 2], new Float32Array(outF * (dim + 2))), null),
      /^linear: w is f32\[14, 14\] \(\[out, in\]\) but x f32\[5, 12\] has 12 columns$/);  // a wider w needs a window
    expectOpError(() => addon.linear(y, f32([n, dim], d.x), f32([outF, dim + 2], new Float32Array(outF * (dim + 2))), null, false, 3),
      /^linear: w is f32\[14, 14\] \(\[out, in\]\) but x f32\[5, 12\] has 12 columns from column 3/);
    expect(floats(y).every((v) => v === 0)).toBe(true);
    expectOpError(() => addon.linearWide(y, f32([n, width], new Float32Array(n * width)), f32([outF, width], new Float32Array(outF * width)), null, false, i32([n], slots), dim + 1, numSlots),
      /^linearWide: x f32\[5, 48\] must be 13 columns, then 4 slots' columns of one width/);
    expectOpError(() => addon.linearWide(y, f32([n, width], new Float32Array(n * width)), f32([outF, width], new Float32Array(outF * width)), null, false, i32([n], [0, 1, 4, 0, 0]), dim, numSlots),
      /^linearWide: slotOfRow\[2\] = 4 is not one of the 4 slots/);
    expect(floats(y).every((v) => v === 0)).toBe(true);
  });

  it('copyRegion with srcCols copies only the first columns (a widened weight narrowed back)', () => {
    const src = f32([2, 5], Float32Array.from({ length: 10 }, (_, i) => i)), dst = addon.zeros('f32', [2, 3]);
    addon.copyRegion(dst, src, 0, 0, 1, false, 3);
    expectSame(floats(dst), Float32Array.from([0, 1, 2, 5, 6, 7]));
  });
});

describe('linear with accumulate', () => {
  it('adds x · wᵀ + bias to what out holds', () => {
    const d = data(6);
    const want = addon.empty('f32', [n, outF]);
    addon.linear(want, f32([n, dim], d.x), f32([outF, dim], d.lw), f32([outF], d.bias));
    const base = d.lw.subarray(0, n * outF);
    const got = f32([n, outF], base);
    addon.linear(got, f32([n, dim], d.x), f32([outF, dim], d.lw), f32([outF], d.bias), true);
    expectSame(floats(got), floats(want).map((v, i) => base[i] + v));
  });
});

describe('linearExpand', () => {
  for (const [withBias, accumulate] of [[false, false], [true, false], [true, true]]) {
    const what = `linear${withBias ? ' with a bias' : ''}, then loraExpand into its output${accumulate ? ', then adds that to out' : ''}`;
    it(`equals ${what}`, () => {
      const d = data(3);
      const base = d.lw.subarray(0, n * outF);
      const args = () => [f32([n, dim], d.x), f32([outF, dim], d.lw), withBias ? f32([outF], d.bias) : null] as const;
      const lora = () => [f32([n, 3 * rank], d.t), f32([outF, numSlots, 3 * rank], d.b), i32([n], slots), Int32Array.from(starts)] as const;
      // transformers' order: residual + (projection + adapter delta)
      const delta = addon.empty('f32', [n, outF]);
      addon.linear(delta, ...args());
      const [t, b, s, st] = lora();
      addon.loraExpand(delta, t, b, s, st);
      const want = accumulate ? floats(delta).map((v, i) => base[i] + v) : floats(delta);
      const got = f32([n, outF], base);
      addon.linearExpand(got, ...args(), ...lora(), accumulate);
      expectSame(floats(got), want);
    });
  }

  it('rejects bad arguments, naming them, and changes nothing', () => {
    const d = data(4);
    const out = f32([n, outF], d.lw.subarray(0, n * outF));
    const before = floats(out);
    const call = (o: { starts?: number[]; slots?: number[]; t?: ReturnType<typeof f32> }) => () =>
      addon.linearExpand(out, f32([n, dim], d.x), f32([outF, dim], d.lw), null, o.t ?? f32([n, 3 * rank], d.t),
        f32([outF, numSlots, 3 * rank], d.b), i32([n], o.slots ?? slots), Int32Array.from(o.starts ?? starts));
    expectOpError(call({ starts: [0, 6, 10, 13] }), /^linearExpand: sliceStarts must run from 0 to 14/);
    expectOpError(call({ starts: [0, 10, 6, 14] }), /^linearExpand: sliceStarts must not decrease/);
    expectOpError(call({ slots: [0, 0, 0, 0, -1] }), /^linearExpand: slotOfRow\[4\] = -1 is not one of the 4 slots/);
    expectOpError(call({ t: f32([n, 2], new Float32Array(n * 2)) }), /^linearExpand: t \(\[n, slices \* rank\]\) must be \[5, 9\]/);
    expectSame(floats(out), before);
  });
});

// Adapters of lower rank than the pool's R are zero-padded; slotRanks tells the ops each
// slot's rank per slice, so the padding is never read. NaN in the padding proves it.
describe('slotRanks', () => {
  const R = rank, S = widths.length;
  // slot 1: ranks 1/2/3, slot 2: 3/0/2, slot 3: full.
  const ranks = [0, 0, 0, 1, 2, 3, 3, 0, 2, 3, 3, 3];
  const padA = (a: Float32Array, fill: number) => a.map((v, i) => {
    const k = Math.floor(i / dim) % (S * R), slot = Math.floor(i / (dim * S * R));
    return k % R < ranks[slot * S + Math.floor(k / R)] ? v : fill;
  });
  // b [outF, slots, S * R]: row o's entries of its own slice, below the slot's rank, are read;
  // the rest (padding, other slices' places) is filled.
  const padB = (b: Float32Array, fill: number) => b.map((v, i) => {
    const col = i % (S * R), slot = Math.floor(i / (S * R)) % numSlots, o = Math.floor(i / (S * R * numSlots));
    const s = starts.findIndex((st, j) => j < S && o >= st && o < starts[j + 1]);
    return Math.floor(col / R) === s && col % R < ranks[slot * S + s] ? v : fill;
  });

  it('every LoRA op gives what zero padding gives, never reading the padding', () => {
    const d = data(8);
    const sr = () => i32([numSlots, S], ranks);
    const slotT = () => i32([n], slots);
    const aOf = (fill: number) => f32([numSlots, S * R, dim], padA(d.a, fill));
    const bOf = (fill: number) => f32([outF, numSlots, S * R], padB(d.b, fill));
    // The shrink.
    const shrinks: [string, (a: ReturnType<typeof f32>, ranked: boolean) => Float32Array][] = [
      ['loraShrink', (a, ranked) => { const t = addon.empty('f32', [n, S * R]); addon.loraShrink(t, f32([n, dim], d.x), a, slotT(), ranked ? sr() : undefined); return floats(t); }],
    ];
    for (const [name, run] of shrinks) expect(run(aOf(NaN), true), name).toEqual(run(aOf(0), false));
    // Expands: plain, and in linear's epilogue (plain and accumulating).
    const t = () => f32([n, S * R], d.t);
    const expand = (b: ReturnType<typeof f32>, ranked: boolean) => { const out = f32([n, outF], d.lw.subarray(0, n * outF)); addon.loraExpand(out, t(), b, slotT(), Int32Array.from(starts), ranked ? sr() : undefined); return floats(out); };
    expect(expand(bOf(NaN), true)).toEqual(expand(bOf(0), false));
    for (const accumulate of [false, true]) {
      const run = (b: ReturnType<typeof f32>, ranked: boolean) => {
        const out = f32([n, outF], d.lw.subarray(0, n * outF));
        addon.linearExpand(out, f32([n, dim], d.x), f32([outF, dim], d.lw), null, t(), b, slotT(), Int32Array.from(starts), accumulate, ranked ? sr() : undefined);
        return floats(out);
      };
      expect(run(bOf(NaN), true)).toEqual(run(bOf(0), false));
    }
  });

  it('are checked: shape and values, naming them', () => {
    const d = data(9);
    const t = addon.zeros('f32', [n, S * R]);
    const a = f32([numSlots, S * R, dim], d.a);
    expectOpError(() => addon.loraShrink(t, f32([n, dim], d.x), a, i32([n], slots), i32([numSlots, 2], new Array(numSlots * 2).fill(1))),
      /^loraShrink: slotRanks .* must be \[slots, slices\] with the 9 rank rows of a split evenly/);
    expectOpError(() => addon.loraShrink(t, f32([n, dim], d.x), a, i32([n], slots), i32([numSlots, S], ranks.map((r) => (r === 2 ? 4 : r)))),
      /^loraShrink: slotRanks\[\d+\] = 4 is outside \[0, 3\]/);
    expectOpError(() => addon.loraExpand(f32([n, outF], d.lw.subarray(0, n * outF)), f32([n, S * R], d.t), f32([outF, numSlots, S * R], d.b),
      i32([n], slots), Int32Array.from(starts), i32([numSlots + 1, S], new Array((numSlots + 1) * S).fill(1))), /^loraExpand: slotRanks \(\[slots, slices\]\) must be \[4, 3\]/);
    expect(floats(t).every((v) => v === 0)).toBe(true);
  });
});

describe('loraJoin, and the expand by every slot at once', () => {
  it('makes [x | s], each row keeping its own slot\'s columns of s only (slot 0: none)', () => {
    const s = f32([3, 6], Float32Array.from({ length: 18 }, (_, i) => i + 1)), x = f32([3, 1], [-1, -2, -3]);
    const wide = addon.empty('f32', [3, 7]);
    addon.loraJoin(wide, x, s, i32([3], [1, 0, 2]), 3);  // width 2: slot s owns columns 2s, 2s + 1
    expect(Array.from(floats(wide))).toEqual([-1, 0, 0, 3, 4, 0, 0, -2, 0, 0, 0, 0, 0, 0, -3, 0, 0, 0, 0, 17, 18]);
  });

  it('makes x · aᵀ (every slot), masked, then · bᵀ (every slot) equal loraShrink then loraExpand', () => {
    const d = data(10), S = widths.length;
    // b with zeros outside each row's slice, as the pool keeps it.
    const bVals = d.b.map((v, i) => {
      const o = Math.floor(i / (S * rank * numSlots)), s = starts.findIndex((st, j) => j < S && o >= st && o < starts[j + 1]);
      return Math.floor((i % (S * rank)) / rank) === s ? v : 0;
    });
    const a = f32([numSlots, S * rank, dim], d.a), b = f32([outF, numSlots, S * rank], bVals);
    const want = f32([n, outF], d.lw.subarray(0, n * outF)), t = addon.empty('f32', [n, S * rank]);
    addon.loraShrink(t, f32([n, dim], d.x), a, i32([n], slots));
    addon.loraExpand(want, t, b, i32([n], slots), Int32Array.from(starts));
    const got = f32([n, outF], d.lw.subarray(0, n * outF)), all = addon.empty('f32', [n, numSlots * S * rank]);
    addon.linear(all, f32([n, dim], d.x), a.view([numSlots * S * rank, dim]), null);
    const wide = addon.empty('f32', [n, dim + numSlots * S * rank]);
    addon.loraJoin(wide, f32([n, dim], d.x), all, i32([n], slots), numSlots);
    // Through [0 | b] (a widened weight whose W is zero): the expand alone.
    const zeroW = new Float32Array(outF * (dim + numSlots * S * rank));
    bVals.forEach((v, i) => { zeroW[Math.floor(i / (numSlots * S * rank)) * (dim + numSlots * S * rank) + dim + (i % (numSlots * S * rank))] = v; });
    addon.linear(got, wide, f32([outF, dim + numSlots * S * rank], zeroW), null, true);
    expectClose(floats(got), floats(want), 1e-5);
  });

  it('rejects bad arguments, naming them, and changes nothing', () => {
    const s = f32([2, 6], Float32Array.from({ length: 12 }, (_, i) => i)), x = f32([2, 2], [1, 2, 3, 4]);
    const wide = addon.zeros('f32', [2, 8]);
    expectOpError(() => addon.loraJoin(wide, x, s, i32([2], [0, 1]), 4), /^loraJoin: s .* must have slots \* width columns, slots = 4/);
    expectOpError(() => addon.loraJoin(wide, x, s, i32([2], [0, 3]), 3), /^loraJoin: slotOfRow\[1\] = 3 is not one of the 3 slots/);
    expectOpError(() => addon.loraJoin(wide, x, s, i32([3], [0, 1, 2]), 3), /^loraJoin: slotOfRow must be \[2\]/);
    expectOpError(() => addon.loraJoin(addon.zeros('f32', [2, 7]), x, s, i32([2], [0, 1]), 3), /^loraJoin: wide must be \[2, 8\]/);
    expect(Array.from(floats(wide)).every((v) => v === 0)).toBe(true);
  });
});

describe('fill', () => {
  it('sets every element of each float dtype, rounding the value to it, and refuses an integer tensor', () => {
    for (const [dtype, value, want] of [['f32', -0.1, Math.fround(-0.1)], ['bf16', 1.5, 1.5], ['f16', -2, -2], ['bf16', 0, 0]] as const) {
      const t = addon.fromArray(dtype, [3, 5], Float32Array.from({ length: 15 }, (_, i) => i + 1));
      addon.fill(t, value);
      expect([...t.toArray()], dtype).toEqual(new Array(15).fill(want));
    }
    const bf = addon.zeros('bf16', [2]);
    addon.fill(bf, 1 / 3);
    expect([...bf.toArray()]).toEqual([0.333984375, 0.333984375]);  // bf16's nearest
    expect(() => addon.fill(addon.zeros('i32', [2]), 1)).toThrow(/fill/);
  });
});
