// upload: region copies from host tensors (an adapter's image) into device tensors; on cpu
// plain copies. Every region is checked before any is copied.
import { describe, expect, it } from 'vitest';

import { addon } from '../../lib/addon/index.js';

const seq = (n: number, from = 1) => Float32Array.from({ length: n }, (_, i) => from + i);

describe('upload', () => {
  it('copies 2-D sources into regions of their destinations', () => {
    const dst = addon.fromArray('f32', [4, 5], seq(20, 100));
    const src = addon.pinnedEmpty('f32', [2, 3]).copyFrom(seq(6));
    const whole = addon.zeros('f32', [1, 3]);
    expect(src.device).toBe('cpu');
    addon.upload([{ dst, src, row: 1, col: 2 }, { dst: whole, src: addon.fromArray('f32', [1, 3], seq(3, 7)) }]);
    const d = [...dst.toArray()];
    expect(d.slice(5, 10)).toEqual([105, 106, 1, 2, 3]);
    expect(d.slice(10, 15)).toEqual([110, 111, 4, 5, 6]);
    expect(d.slice(0, 5)).toEqual([100, 101, 102, 103, 104]);
    expect(d.slice(15)).toEqual([115, 116, 117, 118, 119]);
    expect([...whole.toArray()]).toEqual([7, 8, 9]);
  });

  it('refuses a region that does not fit, another dtype or a bad offset, copying nothing', () => {
    const dst = addon.fromArray('f32', [2, 2], seq(4));
    const ok = { dst, src: addon.fromArray('f32', [1, 2], seq(2, 50)) };
    const bad = [
      [{ dst, src: addon.empty('f32', [2, 2]), row: 1 }, /region 1: src f32\[2, 2\] at \(1, 0\) does not fit in dst f32\[2, 2\]/],
      [{ dst, src: addon.empty('bf16', [1, 2]) }, /region 1: src bf16\[1, 2\] must have dst's dtype/],
      [{ dst, src: ok.src, col: -1 }, /region 1: col must be an integer >= 0/],
      [{ dst, src: addon.empty('f32', [4]) }, /must be 2-D/],
      [{ src: ok.src }, /region 1: dst is missing/],
      [{ dst }, /region 1: src is missing/],
    ] as const;
    for (const [region, message] of bad) {
      expect(() => addon.upload([ok, region as never])).toThrow(message);
      expect([...dst.toArray()]).toEqual([1, 2, 3, 4]);
    }
  });

  it('reads every region before it unwraps any: a getter that disposes a tensor only makes the call fail', () => {
    const dst = addon.fromArray('f32', [2, 2], seq(4)), src = addon.fromArray('f32', [1, 2], seq(2, 50));
    const sneaky = { dst, get src() { dst.dispose(); return src; } };
    expect(() => addon.upload([sneaky as never])).toThrow(/region 0: dst is a disposed Tensor/);
    expect(() => addon.upload([], 1 as never)).toThrow(/upload: join must be a boolean/);
    const other = addon.fromArray('f32', [2, 2], seq(4));
    expect(() => addon.upload([{ dst: other, src, row: 2 ** 60 } as never])).toThrow(/region 0: row must be an integer of at most 2\^53 - 1/);
    expect([...other.toArray()]).toEqual([1, 2, 3, 4]);
  });
});
