// scatterPlan: windows of tensors filled from spans of others, checked once and run often
// (how an adapter's image reaches its slot). On cpu plain copies; test/gpu/tensor.test.ts
// runs the same plans through the cuda kernel.
import { describe, expect, it } from 'vitest';

import { addon } from '../../lib/addon/index.js';

const seq = (n: number, from = 1) => Float32Array.from({ length: n }, (_, i) => from + i);

describe('scatterPlan', () => {
  it('fills windows from spans of a source, transposed too, and leaves the rest; run(true) zeroes the windows', () => {
    const dst = addon.fromArray('f32', [4, 5], seq(20, 100));
    const src = addon.fromArray('f32', [1, 16], seq(16));
    const plan = addon.scatterPlan([
      { dst, row: 1, col: 2, rows: 2, cols: 3, src, at: 1 },               // [[2, 3, 4], [5, 6, 7]]
      { dst, row: 3, col: 0, rows: 1, cols: 2, src, at: 10, transpose: true },  // src [2, 1]: 11, 12
      { dst, row: 0, col: 4, rows: 3, cols: 1, src, at: 12, transpose: true },  // src [1, 3]: 13, 14, 15 down a column
    ]);
    expect(plan.regions).toBe(3);
    plan.run();
    expect([...dst.toArray()]).toEqual([
      100, 101, 102, 103, 13,
      105, 106, 2, 3, 14,
      110, 111, 5, 6, 15,
      11, 12, 117, 118, 119,
    ]);
    plan.run(true);
    expect([...dst.toArray()]).toEqual([
      100, 101, 102, 103, 0,
      105, 106, 0, 0, 0,
      110, 111, 0, 0, 0,
      0, 0, 117, 118, 119,
    ]);
    plan.dispose();
    expect(() => plan.run()).toThrow(/ScatterPlan was disposed/);
  });

  it('transposes a block: the window (r, c) is src (c, r)', () => {
    const dst = addon.zeros('bf16', [3, 4]);
    const src = addon.fromArray('bf16', [4, 3], seq(12));
    addon.scatterPlan([{ dst, src, transpose: true }]).run();  // rows, cols: all of dst
    expect([...dst.toArray()]).toEqual([1, 4, 7, 10, 2, 5, 8, 11, 3, 6, 9, 12]);
  });

  it('reads src and writes dst when it runs, and keeps their memory while it lives', () => {
    const whole = addon.zeros('f32', [2, 3]);
    const dst = whole.view([2, 3]), src = addon.fromArray('f32', [6], seq(6));
    const plan = addon.scatterPlan([{ dst, rows: 1, src, at: 3 }]);
    dst.dispose();
    src.copyFrom(seq(6, 10));
    src.dispose();
    plan.run();
    expect([...whole.toArray()]).toEqual([13, 14, 15, 0, 0, 0]);
  });

  it('refuses a region that does not fit, another dtype or device, or a bad field, making no plan', () => {
    const dst = addon.zeros('f32', [2, 2]), src = addon.fromArray('f32', [4], seq(4));
    const ok = { dst, src };
    const bad = [
      [{ dst, src, row: 1, rows: 2 }, /region 1: \[2, 2\] at \(1, 0\) does not fit in dst f32\[2, 2\]/],
      [{ dst, src, col: 3 }, /region 1: \[2, -1\] at \(0, 3\) does not fit in dst f32\[2, 2\]/],
      [{ dst, src, at: 1 }, /region 1: 4 elements from 1 do not fit in src f32\[4\]/],
      [{ dst, src: addon.empty('bf16', [4]) }, /region 1: src bf16\[4\] must have dst's dtype \(f32\[2, 2\]\)/],
      [{ dst: addon.empty('f32', [4]), src }, /region 1: dst f32\[4\] must be 2-D/],
      [{ dst, src, col: -1 }, /region 1: col must be an integer >= 0/],
      [{ dst, src, transpose: 1 }, /region 1: transpose must be a boolean/],
      [{ dst }, /region 1: src is missing/],
      [{ src }, /region 1: dst is missing/],
      [{ dst, src: [1, 2] }, /region 1: src must be a Tensor/],
      [7, /region 1: must be an object/],
    ] as const;
    for (const [region, message] of bad) expect(() => addon.scatterPlan([ok, region as never])).toThrow(message);
    expect(() => addon.scatterPlan({} as never)).toThrow(/regions must be an array/);
    expect([...dst.toArray()]).toEqual([0, 0, 0, 0]);
  });

  it('reads every region before it unwraps any: a getter that disposes a tensor only makes the call fail', () => {
    const dst = addon.zeros('f32', [2, 2]), src = addon.fromArray('f32', [4], seq(4));
    const sneaky = { dst, get src() { dst.dispose(); return src; } };
    expect(() => addon.scatterPlan([sneaky as never])).toThrow(/region 0: dst is a disposed Tensor/);
    expect(() => addon.scatterPlan([{ dst: src.view([2, 2]), src, at: 2 ** 60 }])).toThrow(/region 0: at must be an integer of at most 2\^53 - 1/);
  });
});
