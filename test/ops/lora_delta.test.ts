// The ops that take an adapted projection's output add each row's delta (LoraDelta): the
// CPU backend against the formula written out here, and the checks on the delta's operands.
import { describe, expect, it } from 'vitest';

import { addon, expectClose, expectOpError, expectSame, f32, floats, i32, withShrink } from './helpers.js';
import { Rng } from './random.js';

const SLOTS = 3;

/** A delta for outputs split at `starts`, rank R; slot 2 has rank R - 1 in every slice (zeros past it). */
function delta(rng: Rng, n: number, starts: number[], R: number) {
  const slices = starts.length - 1, out = starts[slices], bCols = SLOTS * slices * R;
  const ranks = Array.from({ length: SLOTS * slices }, (_, i) => (Math.floor(i / slices) === 2 ? R - 1 : R));
  const live = (col: number) => col % R < ranks[Math.floor(col / R)];
  const bT = rng.floats(bCols * out).map((v, i) => (live(Math.floor(i / out)) ? v : 0));
  const t = rng.floats(n * bCols).map((v, i) => (live(i % bCols) ? v : 0));
  const slots = Array.from({ length: n }, (_, r) => r % SLOTS);
  /** Row r's delta at output o, as LoraDelta defines it. */
  const at = (r: number, o: number) => {
    if (slots[r] === 0) return 0;
    const s = starts.findIndex((st, i) => i < slices && st <= o && o < starts[i + 1]);
    const c = (slots[r] * slices + s) * R;
    let sum = 0;
    for (let k = 0; k < R; k++) sum += t[r * bCols + c + k] * bT[(c + k) * out + o];
    return sum;
  };
  return { bCols, t, at, args: [f32([bCols, out], bT), i32([n], slots), Int32Array.from(starts), i32([SLOTS, slices], ranks)] as const };
}

describe('LoRA deltas on the CPU', () => {
  it('siluMul adds each row delta to gate and up', () => {
    const rng = new Rng(1), n = 5, inter = 12, R = 4;
    const d = delta(rng, n, [0, inter, 2 * inter], R);
    const gu = rng.floats(n * 2 * inter, -3, 3);
    const out = addon.empty('f32', [n, inter]);
    addon.siluMul(out, f32([n, 2 * inter + d.bCols], withShrink(n, 2 * inter, gu, d.t, d.bCols)), ...d.args);
    const want = new Float32Array(n * inter).map((_, j) => {
      const r = Math.floor(j / inter), i = j % inter;
      const g = gu[r * 2 * inter + i] + d.at(r, i), u = gu[r * 2 * inter + inter + i] + d.at(r, inter + i);
      return (g / (1 + Math.exp(-g))) * u;
    });
    expectClose(floats(out), want, 1e-5);
  });

  // The second layout has an empty slice: its column belongs to the slice after it.
  it.each([[[0, 10]], [[0, 4, 4, 10]]])('addRmsNorm adds x and its delta to the residual, then norms it (slices at %j)', (starts) => {
    const rng = new Rng(2), n = 4, dim = 10, R = 3;
    const d = delta(rng, n, starts, R);
    const x = rng.floats(n * dim), res = rng.floats(n * dim), w = rng.floats(dim, 0.5, 1.5);
    const residual = f32([n, dim], res), out = addon.empty('f32', [n, dim]);
    addon.addRmsNorm(residual, f32([n, dim + d.bCols], withShrink(n, dim, x, d.t, d.bCols)), f32([dim], w), 1e-6, out, ...d.args);
    const sum = res.map((v, j) => v + x[j] + d.at(Math.floor(j / dim), j % dim));
    expectClose(floats(residual), sum, 1e-6);
    const normed = sum.map((v, j) => {
      const r = Math.floor(j / dim), row = sum.subarray(r * dim, (r + 1) * dim);
      return w[j % dim] * v / Math.sqrt(row.reduce((a, b) => a + b * b, 0) / dim + 1e-6);
    });
    expectClose(floats(out), normed, 1e-5);
    // next after the delta (a scheduling hint): the same result
    const residual2 = f32([n, dim], res), out2 = addon.empty('f32', [n, dim]);
    addon.addRmsNorm(residual2, f32([n, dim + d.bCols], withShrink(n, dim, x, d.t, d.bCols)), f32([dim], w), 1e-6, out2, ...d.args, 4 * dim);
    expectSame(floats(residual2), floats(residual));
    expectSame(floats(out2), floats(out));
  });

  it('ropeKvWrite adds the delta to q, k and v before it norms, rotates and caches them', () => {
    const rng = new Rng(3), n = 3, H = 2, K = 1, hd = 4, R = 2, qkvW = (H + 2 * K) * hd;
    const d = delta(rng, n, [0, H * hd, (H + K) * hd, qkvW], R);
    const x = rng.floats(n * qkvW);
    const qkv = f32([n, qkvW + d.bCols], withShrink(n, qkvW, x, d.t, d.bCols));
    const k = addon.zeros('f32', [2, 4, K, hd]), v = addon.zeros('f32', [2, 4, K, hd]);
    addon.ropeKvWrite(qkv, i32([n], [0, 0, 0]), f32([2], [1, 1]), k, v, i32([n], [0, 1, 2]), null, null, H, K, hd, 1e-6, ...d.args);
    // Position 0 rotates nothing: q and k are x plus the delta, v's cache rows too.
    const got = floats(qkv), kv = [floats(k), floats(v)];
    for (let r = 0; r < n; r++)
      for (let o = 0; o < qkvW; o++) {
        const want = x[r * qkvW + o] + d.at(r, o);
        expect(got[r * (qkvW + d.bCols) + o]).toBeCloseTo(want, 5);
        if (o >= H * hd) expect(kv[o < (H + K) * hd ? 0 : 1][r * hd + (o % hd)]).toBeCloseTo(want, 5);
      }
  });

  it('rejects operands that do not match the rows they add to', () => {
    const rng = new Rng(4);
    const d = delta(rng, 2, [0, 8], 2);
    const y = f32([2, 8 + d.bCols], new Float32Array(2 * (8 + d.bCols)));
    const w = f32([8], new Float32Array(8).fill(1));
    const [bT, slots, starts, ranks] = d.args;
    const res = () => addon.zeros('f32', [2, 8]);
    expectOpError(() => addon.addRmsNorm(res(), y, w, 1e-6, res(), f32([d.bCols, 7], new Float32Array(d.bCols * 7)), slots, starts, ranks),
      /^addRmsNorm: bT f32\[6, 7\] must be \[6, 8\]/);
    expectOpError(() => addon.addRmsNorm(res(), y, w, 1e-6, res(), bT, slots, starts, i32([4, 1], [2, 2, 2, 2])),
      /^addRmsNorm: slotRanks i32\[4, 1\] must split the 6 shrink columns/);
    const withStarts = (st: unknown) => () => addon.addRmsNorm(res(), y, w, 1e-6, res(), bT, slots, st as Int32Array, ranks);
    expectOpError(withStarts(Int32Array.from([0, 7])), /^addRmsNorm: sliceStarts must run from 0 to 8/);
    expectOpError(withStarts(i32([2], [0, 8])), /^addRmsNorm: sliceStarts must be an Int32Array/);
    expectOpError(withStarts([0, 8]), /^addRmsNorm: sliceStarts must be an Int32Array/);
    expectOpError(withStarts(Int32Array.from([0, 5, 8])), /^addRmsNorm: sliceStarts has 3 entries, but slotRanks i32\[3, 1\] has 1 slices/);
    expectOpError(withStarts(new Int32Array(10)), /^addRmsNorm: sliceStarts has 10 entries; it must have 2 to 9 \(slices \+ 1\)/);
    expectOpError(() => addon.addRmsNorm(res(), y, w, 1e-6, res(), bT, i32([2], [0, 3]), starts, ranks),
      /^addRmsNorm: slotOfRow\[1\] = 3 is not one of the 3 slots/);
    expectOpError(() => addon.siluMul(addon.empty('f32', [2, 8]), y, bT, slots, starts, ranks),
      /^siluMul: gateUp f32\[2, 14\] must have out's rows and at least twice its columns/);
  });
});
