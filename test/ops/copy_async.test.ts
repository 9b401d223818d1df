// copyFromAsync on the cpu: the same as copyFrom (the asynchronous path is cuda's; see
// test/gpu/graph.test.ts), with the same checks.
import { describe, expect, it } from 'vitest';

import { addon } from '../../lib/addon/index.js';

describe('copyFromAsync on the cpu', () => {
  it('fills every dtype as copyFrom does', () => {
    const f = addon.empty('f32', [3]).copyFromAsync(Float32Array.from([1.5, -2, 3]));
    expect([...f.toArray()]).toEqual([1.5, -2, 3]);
    const b = addon.empty('bf16', [2]).copyFromAsync(Float32Array.from([1.00390625, 2]));
    expect([...b.toArray()]).toEqual([...addon.empty('bf16', [2]).copyFrom(Float32Array.from([1.00390625, 2])).toArray()]);
    const i = addon.empty('i32', [2, 2]).copyFromAsync(Int32Array.from([1, -2, 3, 4]));
    expect([...i.toArray()]).toEqual([1, -2, 3, 4]);
    const l = addon.empty('i64', [2]).copyFromAsync(BigInt64Array.from([5n, -6n]));
    expect([...l.toArray()]).toEqual([5n, -6n]);
    const view = addon.zeros('i32', [4]).narrow(1, 2).copyFromAsync(Int32Array.from([7, 8]));
    expect([...view.toArray()]).toEqual([7, 8]);
  });

  it('refuses a wrong length or element type', () => {
    expect(() => addon.empty('f32', [3]).copyFromAsync(new Float32Array(2))).toThrow(/has 2 elements but f32\[3\] needs 3/);
    expect(() => addon.empty('i32', [2]).copyFromAsync(new Float32Array(2))).toThrow(/cannot fill a i32 tensor/);
  });
});
