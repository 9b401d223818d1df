// ropeKvWrite: headRmsNorm (optional), rope and kvWrite as one op — the same values as the
// three ops in turn, and the same refusals, with nothing changed by a refused call.
import { describe, expect, it } from 'vitest';

import { addon, expectOpError, expectSame, f32, floats, i32, type Tensor } from './helpers.js';
import { Rng } from './random.js';
import * as ref from './reference.js';
import type { HeadLayout } from './reference.js';

const l: HeadLayout = { numHeads: 4, numKvHeads: 2, headDim: 8 };
const [numBlocks, blockSize, n] = [3, 4, 5];
const cacheShape = [numBlocks, blockSize, l.numKvHeads, l.headDim];

function setup(seed: number) {
  const rng = new Rng(seed);
  return {
    rows: rng.floats(n * ref.rowWidth(l), -2, 2),
    sentinel: rng.floats(numBlocks * blockSize * l.numKvHeads * l.headDim),
    positions: [0, 7, 3, 11, 2],
    slots: [5, -1, 0, 11, 3],
    invFreq: Float32Array.from([1, 0.3, 0.05]),  // partial rotary: 6 of 8 dims
    qNorm: rng.floats(l.headDim, 0.5, 1.5),
    kNorm: rng.floats(l.headDim, 0.5, 1.5),
  };
}

describe('ropeKvWrite', () => {
  for (const withNorms of [false, true]) {
    it(`equals ${withNorms ? 'headRmsNorm, ' : ''}rope then kvWrite`, () => {
      const s = setup(withNorms ? 3 : 4);
      const args = () => ({
        qkv: f32([n, ref.rowWidth(l)], s.rows), k: f32(cacheShape, s.sentinel), v: f32(cacheShape, s.sentinel),
        pos: i32([n], s.positions), slots: i32([n], s.slots), inv: f32([3], s.invFreq),
        qw: f32([l.headDim], s.qNorm), kw: f32([l.headDim], s.kNorm),
      });
      const a = args();
      if (withNorms) addon.headRmsNorm(a.qkv, a.qw, a.kw, l.numHeads, l.numKvHeads, l.headDim, 1e-6);
      addon.rope(a.qkv, a.pos, a.inv, l.numHeads, l.numKvHeads, l.headDim);
      addon.kvWrite(a.k, a.v, a.qkv, a.slots, l.numHeads, l.numKvHeads, l.headDim);
      const b = args();
      addon.ropeKvWrite(b.qkv, b.pos, b.inv, b.k, b.v, b.slots, withNorms ? b.qw : null, withNorms ? b.kw : null,
        l.numHeads, l.numKvHeads, l.headDim, 1e-6);
      expectSame(floats(b.qkv), floats(a.qkv));
      expectSame(floats(b.k), floats(a.k));
      expectSame(floats(b.v), floats(a.v));
    });
  }

  it('rejects bad arguments, naming them, and changes nothing', () => {
    const s = setup(5);
    const qkv = f32([n, ref.rowWidth(l)], s.rows);
    const k = f32(cacheShape, s.sentinel), v = f32(cacheShape, s.sentinel);
    const pos = i32([n], s.positions), slots = i32([n], s.slots), inv = f32([3], s.invFreq);
    const qw = f32([l.headDim], s.qNorm);
    const call = (o: { slots?: Tensor; inv?: Tensor; kw?: Tensor | null; pos?: Tensor }) => () =>
      addon.ropeKvWrite(qkv, o.pos ?? pos, o.inv ?? inv, k, v, o.slots ?? slots, qw, o.kw === undefined ? qw : o.kw,
        l.numHeads, l.numKvHeads, l.headDim, 1e-6);
    expectOpError(call({ slots: i32([n], [0, 1, 2, 12, 3]) }), /^ropeKvWrite: slots\[3\] = 12 is past the cache's 12 slots/);
    expectOpError(call({ kw: null }), /^ropeKvWrite: qWeight and kWeight must be given together/);
    expectOpError(call({ kw: f32([4], [1, 1, 1, 1]) }), /^ropeKvWrite: kWeight must be \[8\]/);
    expectOpError(call({ inv: f32([5], [1, 1, 1, 1, 1]) }), /^ropeKvWrite: invFreq has 5 entries/);
    expectOpError(call({ pos: i32([2], [0, 1]) }), /^ropeKvWrite: positions must be \[5\]/);
    expectSame(floats(qkv), s.rows);
    expectSame(floats(k), s.sentinel);
    expect(floats(v)).toEqual(s.sentinel);
  });
});
