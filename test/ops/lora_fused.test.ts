// The fused LoRA ops: addRmsNormShrink = addRmsNorm then loraShrink of its output, and
// linearExpand = linear then loraExpand into its output, on the CPU backend (the CUDA
// kernels are checked against these in test/gpu/lora.test.ts). Refused calls change nothing.
import { describe, expect, it } from 'vitest';

import { addon, expectOpError, expectSame, f32, floats, i32 } from './helpers.js';
import { Rng } from './random.js';

const [n, dim, rank, numSlots] = [5, 12, 3, 4];
const widths = [6, 4, 4];  // three slices of one fused output, like q/k/v
const outF = widths.reduce((a, b) => a + b, 0);
const starts = [0, 6, 10, 14];
const slots = [0, 2, 3, 2, 1];

function data(seed: number) {
  const rng = new Rng(seed);
  return {
    res: rng.floats(n * dim), x: rng.floats(n * dim), w: rng.floats(dim, 0.5, 1.5),
    a: rng.floats(numSlots * widths.length * rank * dim), b: rng.floats(numSlots * outF * rank),
    lw: rng.floats(outF * dim), bias: rng.floats(outF), t: rng.floats(n * widths.length * rank),
  };
}

describe('addRmsNormShrink', () => {
  it('equals addRmsNorm, then loraShrink of its output', () => {
    const d = data(1);
    const want = { res: f32([n, dim], d.res), out: addon.empty('f32', [n, dim]), t: addon.empty('f32', [n, 3 * rank]) };
    addon.addRmsNorm(want.res, f32([n, dim], d.x), f32([dim], d.w), 1e-6, want.out);
    addon.loraShrink(want.t, want.out, f32([numSlots, 3 * rank, dim], d.a), i32([n], slots));
    const got = { res: f32([n, dim], d.res), out: addon.empty('f32', [n, dim]), t: addon.empty('f32', [n, 3 * rank]) };
    addon.addRmsNormShrink(got.res, f32([n, dim], d.x), f32([dim], d.w), 1e-6, got.out, got.t,
      f32([numSlots, 3 * rank, dim], d.a), i32([n], slots));
    for (const k of ['res', 'out', 't'] as const) expectSame(floats(got[k]), floats(want[k]));
    expect(floats(got.t).subarray(0, 3 * rank).every((v) => v === 0)).toBe(true);  // slot 0: no adapter
  });

  it('rejects bad arguments, naming them, and changes nothing', () => {
    const d = data(2);
    const res = f32([n, dim], d.res), out = f32([n, dim], d.x), t = addon.zeros('f32', [n, 3 * rank]);
    const a = f32([numSlots, 3 * rank, dim], d.a);
    const call = (o: { slots?: number[]; t?: ReturnType<typeof f32>; a?: ReturnType<typeof f32> }) => () =>
      addon.addRmsNormShrink(res, f32([n, dim], d.x), f32([dim], d.w), 1e-6, out, o.t ?? t, o.a ?? a, i32([n], o.slots ?? slots));
    expectOpError(call({ slots: [0, 1, 4, 0, 0] }), /^addRmsNormShrink: slotOfRow\[2\] = 4 is not one of the 4 slots/);
    expectOpError(call({ t: addon.zeros('f32', [n, 2]) }), /^addRmsNormShrink: t must be \[5, 9\]/);
    expectOpError(call({ a: f32([numSlots, 3 * rank, 5], new Float32Array(numSlots * 3 * rank * 5)) }), /^addRmsNormShrink: a .* does not match x/);
    expectSame(floats(res), d.res);
    expectSame(floats(out), d.x);
  });
});

describe('linearExpand', () => {
  for (const withBias of [false, true]) {
    it(`equals linear${withBias ? ' with a bias' : ''}, then loraExpand into its output`, () => {
      const d = data(3);
      const args = () => [f32([n, dim], d.x), f32([outF, dim], d.lw), withBias ? f32([outF], d.bias) : null] as const;
      const lora = () => [f32([n, 3 * rank], d.t), f32([numSlots, outF, rank], d.b), i32([n], slots), i32([4], starts)] as const;
      const want = addon.empty('f32', [n, outF]);
      addon.linear(want, ...args());
      const [t, b, s, st] = lora();
      addon.loraExpand(want, t, b, s, st);
      const got = addon.empty('f32', [n, outF]);
      addon.linearExpand(got, ...args(), ...lora());
      expectSame(floats(got), floats(want));
    });
  }

  it('rejects bad arguments, naming them, and changes nothing', () => {
    const d = data(4);
    const out = f32([n, outF], d.lw.subarray(0, n * outF));
    const before = floats(out);
    const call = (o: { starts?: number[]; slots?: number[]; t?: ReturnType<typeof f32> }) => () =>
      addon.linearExpand(out, f32([n, dim], d.x), f32([outF, dim], d.lw), null, o.t ?? f32([n, 3 * rank], d.t),
        f32([numSlots, outF, rank], d.b), i32([n], o.slots ?? slots), i32([(o.starts ?? starts).length], o.starts ?? starts));
    expectOpError(call({ starts: [0, 6, 10, 13] }), /^linearExpand: sliceStarts must run from 0 to out's width/);
    expectOpError(call({ slots: [0, 0, 0, 0, -1] }), /^linearExpand: slotOfRow\[4\] = -1 is not one of the 4 slots/);
    expectOpError(call({ t: f32([n, 2], new Float32Array(n * 2)) }), /^linearExpand: t \(\[n, slices \* rank\]\) must be \[5, 9\]/);
    expectSame(floats(out), before);
  });
});
