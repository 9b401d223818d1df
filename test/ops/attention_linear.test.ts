// pagedAttentionLinear on the CPU: attention and the projection of its output (a decode
// layer's o) as one op, against pagedAttention then linear, and its argument checks.
import { describe, expect, it } from 'vitest';

import { addon, expectOpError, expectSame, f32, floats, i32, type Tensor } from './helpers.js';
import { Rng } from './random.js';

const L = { numHeads: 4, numKvHeads: 2, headDim: 8 };
const IN = L.numHeads * L.headDim, WIDTH = (L.numHeads + 2 * L.numKvHeads) * L.headDim, BLOCK = 4;

/** A step of `lens.length` sequences, each one new token at the end of its context, over a filled cache. */
function decodeStep(rng: Rng, lens: number[]) {
  const maxBlocks = Math.ceil(Math.max(...lens) / BLOCK) + 1;
  const numBlocks = lens.length * maxBlocks;
  const cacheShape = [numBlocks, BLOCK, L.numKvHeads, L.headDim];
  const cache = () => f32(cacheShape, rng.floats(numBlocks * BLOCK * L.numKvHeads * L.headDim, -2, 2));
  const tables = lens.flatMap((_, s) => Array.from({ length: maxBlocks }, (_, b) => s * maxBlocks + b));
  return {
    qkv: f32([lens.length, WIDTH], rng.floats(lens.length * WIDTH, -2, 2)),
    k: cache(),
    v: cache(),
    tables: i32([lens.length, maxBlocks], tables),
    starts: i32([lens.length + 1], lens.map((_, s) => s).concat(lens.length)),
    lens: i32([lens.length], lens),
  };
}
type Step = ReturnType<typeof decodeStep>;
const attentionArgs = (attn: Tensor, s: Step) =>
  [attn, s.qkv, s.k, s.v, s.tables, s.starts, s.lens, L.numHeads, L.numKvHeads, L.headDim, 0.3] as const;

describe('pagedAttentionLinear', () => {
  // [rows' context lengths, out, W's extra columns, bias, accumulate, slots of an extended weight]
  it.each([
    [[5], 6, 0, false, false, 0], [[9, 3, 14], 5, 3, true, true, 0], [[7, 2], 4, 0, false, false, 2],
  ])('contexts %j, out %i, W %i columns wider, bias %s, accumulate %s, %i slots', (lens, outF, wider, withBias, accumulate, slots) => {
    const rng = new Rng(lens.length * 10 + outF + wider);
    const step = decodeStep(rng, lens);
    const n = lens.length, perSlot = 2, rows = outF + slots * perSlot;
    const w = f32([rows, IN + wider], rng.floats(rows * (IN + wider), -0.5, 0.5));
    const bias = withBias ? f32([rows], rng.floats(rows)) : null;
    const unused = slots ? ([i32([n], lens.map((_, i) => i % (slots + 1))), outF, perSlot] as const) : ([] as const);
    const start = rng.floats(n * rows, -1, 1);
    const attn = addon.empty('f32', [n, IN]), out = f32([n, rows], start);
    addon.pagedAttentionLinear(...attentionArgs(attn, step), out, w, bias, accumulate, ...unused);
    const apartAttn = addon.empty('f32', [n, IN]), apart = f32([n, rows], start);
    addon.pagedAttention(...attentionArgs(apartAttn, step));
    addon.linear(apart, apartAttn, w, bias, accumulate, 0, ...unused);
    expectSame(floats(out), floats(apart));
    expectSame(floats(attn), floats(apartAttn));
  });

  it('rejects bad arguments, naming them, and writes nothing', () => {
    const rng = new Rng(3);
    const step = decodeStep(rng, [6, 2]);
    const args = () => ({ attn: addon.zeros('f32', [2, IN]), out: addon.zeros('f32', [2, 5]), w: addon.zeros('f32', [5, IN]), lens: step.lens });
    const call = (o: Partial<ReturnType<typeof args>>, ...unused: [] | [Tensor, number, number]) => {
      const a = { ...args(), ...o };
      addon.pagedAttentionLinear(...attentionArgs(a.attn, { ...step, lens: a.lens }), a.out, a.w, null, true, ...unused);
      return a;
    };
    expect(() => call({})).not.toThrow();
    expectOpError(() => call({ attn: addon.zeros('f32', [2, IN + 1]) }),
      /^pagedAttentionLinear: attn \(\[tokens, numHeads \* headDim\]\) must be \[2, 32\]/);
    expectOpError(() => call({ w: addon.zeros('f32', [5, IN - 1]) }), /^pagedAttentionLinear: w /);
    expectOpError(() => call({ out: addon.zeros('f32', [2, 4]) }), /^pagedAttentionLinear: out /);
    expectOpError(() => call({ lens: i32([2], [6, 99]) }), /^pagedAttentionLinear: sequence 1 needs 25 blocks but blockTables has 3 columns/);
    expectOpError(() => call({}, i32([2], [0, 1]), 6, 2), /^pagedAttentionLinear: from 6 is past w's 5 rows/);
    const untouched = { attn: f32([2, IN], new Float32Array(2 * IN).fill(7)), out: f32([2, 5], new Float32Array(10).fill(7)) };
    expectOpError(() => call({ ...untouched, w: addon.zeros('f32', [5, IN + 1]), lens: i32([2], [6, 99]) }), /^pagedAttentionLinear: /);
    expect(floats(untouched.attn).every((v) => v === 7) && floats(untouched.out).every((v) => v === 7)).toBe(true);
  });
});
