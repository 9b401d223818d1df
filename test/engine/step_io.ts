// The cases for a step's inputs and outputs on their way between host and device
// (StagedUploads, Readback), shared by the cpu run (test/engine/step_io.test.ts) and the
// cuda one (test/gpu/step_io.test.ts), where both are asynchronous.
import { expect, it } from 'vitest';

import { addon, type DeviceName } from '../../lib/addon/index.js';
import { Readback } from '../../lib/engine/readback.js';
import { StagedUploads } from '../../lib/engine/staged_uploads.js';

const list = (a: ArrayLike<number | bigint>) => Array.from(a);

export function stepIoCases(device: DeviceName): void {
  it('staged uploads: one buffer per dtype, views shaped as asked, each upload seen by the ops after it', () => {
    const up = new StagedUploads(device);
    const first = up.upload([
      { dtype: 'i32', data: Int32Array.from([1, 2, 3]) },
      { dtype: 'f32', data: Float32Array.from([0.5, -1]) },
      { dtype: 'i32', data: Int32Array.from([4, 5, 6, 7]), shape: [2, 2] },
      { dtype: 'i64', data: BigInt64Array.from([9n]) },
      { dtype: 'i32', data: new Int32Array(0) },
    ]);
    const copies = first.map((t) => t.to(device));  // enqueued before the next upload
    expect(first.map((t) => t.shape)).toEqual([[3], [2], [2, 2], [1], [0]]);
    expect(first.map((t) => t.dtype)).toEqual(['i32', 'f32', 'i32', 'i64', 'i32']);
    first.forEach((t) => t.dispose());
    // Larger than the buffers: they grow; the copies above still hold the first values.
    const big = Int32Array.from({ length: 100 }, (_, i) => i * 3);
    const second = up.upload([{ dtype: 'i32', data: big }, { dtype: 'f32', data: Float32Array.from([2]) }]);
    expect(list(second[0].toArray())).toEqual(list(big));
    expect(list(second[1].toArray())).toEqual([2]);
    expect(copies.map((t) => list(t.toArray()))).toEqual([[1, 2, 3], [0.5, -1], [4, 5, 6, 7], [9n], []]);
    second.forEach((t) => t.dispose());
    copies.forEach((t) => t.dispose());
    up.dispose();
  });

  it('readback: each send keeps its values until read, in any order, across the two turns', () => {
    const rb = new Readback(device);
    const ids = addon.empty('i32', [4], device), lp = addon.empty('f32', [2, 3], device);
    const send = (k: number) => {
      ids.copyFromAsync(Int32Array.from([k, k + 1, k + 2, k + 3]));
      lp.copyFromAsync(Float32Array.from([k, 0.5, -k, 1, 2, 3]));
      return rb.send([ids, lp, addon.empty('i32', [2, 0], device)]);
    };
    const [a, b, c] = [send(10), send(20), send(30)];  // c reuses a's turn: a is read first
    expect(c.read().map(list)).toEqual([[30, 31, 32, 33], [30, 0.5, -30, 1, 2, 3], []]);
    expect(a.read().map(list)).toEqual([[10, 11, 12, 13], [10, 0.5, -10, 1, 2, 3], []]);
    expect(b.read()[0]).toEqual(Int32Array.from([20, 21, 22, 23]));
    expect(b.read()).toBe(b.read());  // read once
    const wide = addon.zeros('i32', [300], device);  // larger than the turn's buffer: it grows
    expect(list(rb.send([wide]).read()[0])).toEqual(new Array(300).fill(0));
    [ids, lp, wide].forEach((t) => t.dispose());
    rb.dispose();
  });
}
