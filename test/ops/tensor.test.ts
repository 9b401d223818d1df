// Tensor handles: construction and float conversion, views, narrow, dispose, copyFrom, readInto.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { addon, expectOpError, expectSame, f32, FLOAT_DTYPES, floats, i32, ints, literal } from './helpers.js';
import { Rng, roundBf16, roundTo } from './random.js';

/** The bf16 bit patterns of values that are already bf16-exact. */
function bf16Bits(values: Float32Array): Uint16Array {
  const words = new Uint32Array(Float32Array.from(values).buffer);
  return Uint16Array.from(words, (w) => w >>> 16);
}

describe('construction', () => {
  it('zeros, empty and fromArray give the asked dtype and shape', () => {
    const z = addon.zeros('bf16', [2, 3]);
    expect([z.dtype, z.shape, z.device, z.disposed]).toEqual(['bf16', [2, 3], 'cpu', false]);
    expect(Array.from(floats(z))).toEqual([0, 0, 0, 0, 0, 0]);
    expect(addon.empty('i64', [4]).toArray()).toBeInstanceOf(BigInt64Array);
    expect(Array.from(ints(i32([3], [1, -2, 3])))).toEqual([1, -2, 3]);
  });

  it.each(['bf16', 'f16'] as const)('fromArray rounds f32 to %s to nearest even', (dtype) => {
    const rng = new Rng(dtype.length);
    const special = [0, -0, 1, Infinity, -Infinity, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 65504, 65519, 65520,
      -70000, 1e-8, 6e-8, 2 ** -24 * 1.5, 3.4e38, -1e-40, 1e-45];
    const data = Float32Array.from([...special, ...rng.floats(2000, -10, 10), ...Array.from(rng.floats(500, -30, 30), (e) => 2 ** e)]);
    expectSame(floats(addon.fromArray(dtype, [data.length], data)), roundTo(dtype, data));
    expect(Number.isNaN(floats(addon.fromArray(dtype, [1], Float32Array.of(NaN)))[0])).toBe(true);
  });

  it('fromArray takes raw bits from a Uint16Array', () => {
    expect(Array.from(floats(addon.fromArray('bf16', [2], Uint16Array.of(0x3f80, 0xc000))))).toEqual([1, -2]);
    expect(Array.from(floats(addon.fromArray('f16', [2], Uint16Array.of(0x3c00, 0x0001))))).toEqual([1, 2 ** -24]);
  });

  it('rejects bad dtypes, shapes and arrays', () => {
    expectOpError(() => addon.zeros('f8' as never, [2]), /unknown dtype 'f8'/);
    expectOpError(() => addon.zeros('f32', [2, -1]), /shape\[1\] must be a non-negative integer/);
    expectOpError(() => addon.fromArray('f32', [2, 2], new Float32Array(3)), /has 3 elements but f32\[2, 2\] needs 4/);
    expectOpError(() => addon.fromArray('i32', [2], new Float32Array(2)), /cannot fill a i32 tensor/);
  });
});

describe('view and narrow', () => {
  it('view shares storage and infers one -1 size', () => {
    const t = f32([2, 6], Array.from({ length: 12 }, (_, i) => i));
    const v = t.view([3, -1]);
    expect(v.shape).toEqual([3, 4]);
    v.copyFrom(new Float32Array(12).fill(7));
    expect(Array.from(floats(t))).toEqual(new Array(12).fill(7));
    expectOpError(() => t.view([5, 2]), /^view: f32\[2, 6\] has 12 elements, the new shape has 10/);
    expectOpError(() => t.view([5, -1]), /^view: cannot infer a size/);
  });

  it.each(FLOAT_DTYPES)('a write through narrow shows up in the parent (%s)', (dtype) => {
    const parent = addon.fromArray(dtype, [4, 3], Float32Array.from({ length: 12 }, (_, i) => i));
    const rows = parent.narrow(1, 2);
    expect(rows.shape).toEqual([2, 3]);
    expect(Array.from(floats(rows))).toEqual([3, 4, 5, 6, 7, 8]);
    rows.copyFrom(Float32Array.of(-1, -2, -3, -4, -5, -6));
    expect(Array.from(floats(parent))).toEqual([0, 1, 2, -1, -2, -3, -4, -5, -6, 9, 10, 11]);
  });

  it('an op writing into a narrowed view of a view writes the parent rows', () => {
    const parent = addon.zeros('f32', [2, 3, 2]);
    const middle = parent.view([6, 2]).narrow(2, 3).narrow(1, 2); // rows 3 and 4 of [6, 2]
    addon.add(middle, f32([2, 2], [1, 2, 3, 4]), f32([2, 2], [10, 20, 30, 40]));
    expect(Array.from(floats(parent))).toEqual([0, 0, 0, 0, 0, 0, 11, 22, 33, 44, 0, 0]);
  });

  it('narrow outside the rows throws', () => {
    const t = addon.zeros('f32', [4, 2]);
    expectOpError(() => t.narrow(3, 2), /^narrow\(3, 2\) is outside the 4 rows of f32\[4, 2\]/);
    expectOpError(() => t.narrow(-1, 1), /^narrow\(-1, 1\) is outside/);
    // Sizes a double cannot hold exactly, which once wrapped past the bounds check.
    expectOpError(() => t.narrow(1e19, 1), /^narrow: start must be an integer of at most 2\^53 - 1/);
    expectOpError(() => t.narrow(2 ** 52, 2 ** 52), /^narrow\(4503599627370496, 4503599627370496\) is outside/);
    expectOpError(() => t.narrow(1.5, 1), /^narrow: start must be an integer/);
    expectOpError(() => t.narrow('1' as never, 1), /^narrow: start must be a number/);
  });

  it('view refuses shapes whose element count wraps, or is not a number', () => {
    const t = addon.zeros('f32', [4096]);
    expectOpError(() => t.view([2 ** 52, 2 ** 12]), /^view: f32\[4096\] has 4096 elements, far fewer than the new shape's/);
    expectOpError(() => t.view([2 ** 62 + 1024, 4]), /^view: shape\[0\] must be an integer of at most 2\^53 - 1/);
    expectOpError(() => t.view(['x' as never]), /^view: shape\[0\] must be a number/);
    expect(addon.zeros('f32', [0]).view([5, 0]).shape).toEqual([5, 0]);
  });
});

describe('dispose', () => {
  it('makes any later use of the handle throw "disposed"', () => {
    const t = f32([2, 2], [1, 2, 3, 4]);
    t.dispose();
    expect(t.disposed).toBe(true);
    const uses: Array<() => unknown> = [
      () => t.toArray(),
      () => t.shape,
      () => t.dtype,
      () => t.view([4]),
      () => t.narrow(0, 1),
      () => t.copyFrom(new Float32Array(4)),
    ];
    for (const use of uses) expectOpError(use, /Tensor was disposed/);
    expectOpError(() => addon.linear(addon.empty('f32', [2, 2]), t, addon.zeros('f32', [2, 2]), null), /^linear: x is a disposed Tensor/);
    expectOpError(() => addon.readInto(t, 0, '/nonexistent', 0, 'f32', 1), /^readInto: dst is a disposed Tensor/);
    t.dispose(); // a second dispose is harmless
  });

  it('leaves other views of the storage usable', () => {
    const t = f32([2, 2], [1, 2, 3, 4]);
    const v = t.view([4]);
    t.dispose();
    expect(Array.from(floats(v))).toEqual([1, 2, 3, 4]);
  });
});

describe('copyFrom', () => {
  it('checks the element count and the array type, and returns the tensor', () => {
    const t = addon.zeros('f32', [2, 3]);
    expect(t.copyFrom(new Float32Array(6).fill(2))).toBe(t);
    expectOpError(() => t.copyFrom(new Float32Array(5)), /^copyFrom\(array\) has 5 elements but f32\[2, 3\] needs 6/);
    expectOpError(() => t.copyFrom(new Float32Array(7)), /has 7 elements/);
    expectOpError(() => t.copyFrom(new Int32Array(6)), /cannot fill a f32 tensor/);
    expect(Array.from(floats(t))).toEqual(new Array(6).fill(2));
  });

  it('rounds Float32Array data into bf16', () => {
    const data = new Rng(5).floats(33);
    expectSame(floats(addon.zeros('bf16', [33]).copyFrom(data)), roundTo('bf16', data));
  });
});

describe('readInto', () => {
  const dir = mkdtempSync(join(tmpdir(), 'mstar-ops-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  // A file of: 12 header bytes, 9 f32 values, 9 bf16 values.
  const rng = new Rng(42);
  const f32Data = rng.floats(9, -5, 5);
  const bf16Data = roundTo('bf16', rng.floats(9, -5, 5));
  const F32_AT = 12;
  const BF16_AT = F32_AT + 9 * 4;
  const path = join(dir, 'weights.bin');
  writeFileSync(path, Buffer.concat([Buffer.alloc(F32_AT, 0xab), Buffer.from(f32Data.buffer), Buffer.from(bf16Bits(bf16Data).buffer)]));

  /** A tensor of ten -1s with file elements [from, from + count) read into it at element 3. */
  function readAt3(dtype: 'f32' | 'bf16', fileOffset: number, srcDtype: 'f32' | 'bf16', count: number) {
    const t = addon.fromArray(dtype, [10], new Float32Array(10).fill(-1));
    addon.readInto(t, 3, path, fileOffset, srcDtype, count);
    return Array.from(floats(t));
  }
  const around = (values: ArrayLike<number>) => [-1, -1, -1, ...Array.from(values), ...new Array(7 - values.length).fill(-1)];

  it('reads f32 data at an offset into an f32 tensor at an element offset', () => {
    expect(readAt3('f32', F32_AT + 4, 'f32', 5)).toEqual(around(f32Data.subarray(1, 6)));
  });

  it('converts bf16 file data into an f32 tensor', () => {
    expect(readAt3('f32', BF16_AT + 2, 'bf16', 6)).toEqual(around(bf16Data.subarray(1, 7)));
  });

  it('reads bf16 data into a bf16 tensor as is, and rounds f32 data into it', () => {
    expect(readAt3('bf16', BF16_AT, 'bf16', 7)).toEqual(around(bf16Data.subarray(0, 7)));
    expect(readAt3('bf16', F32_AT, 'f32', 7)).toEqual(around(Array.from(f32Data.subarray(0, 7), roundBf16)));
  });

  it('converts reads larger than its staging buffer', () => {
    const count = 4_500_000; // past the 8 MiB (4 Mi bf16 elements) staging chunk
    const pattern = roundTo('bf16', Float32Array.from({ length: 7001 }, (_, i) => i / 8 - 400));
    const values = Float32Array.from({ length: count }, (_, i) => pattern[i % pattern.length]);
    const big = join(dir, 'big.bin');
    writeFileSync(big, Buffer.concat([Buffer.alloc(6), Buffer.from(bf16Bits(values).buffer)]));
    const t = addon.zeros('f32', [count + 1]);
    addon.readInto(t, 1, big, 6, 'bf16', count);
    const got = floats(t);
    expect(got[0]).toBe(0);
    expectSame(got.subarray(1), values);
  });

  it('names the path of a missing file', () => {
    const missing = join(dir, 'missing.bin');
    expectOpError(() => addon.readInto(addon.zeros('f32', [4]), 0, missing, 0, 'f32', 4), new RegExp(`^${literal(missing)}: cannot open`));
  });

  it('names the path of a read past the end of the file', () => {
    expectOpError(() => addon.readInto(addon.zeros('f32', [14]), 0, path, F32_AT, 'f32', 14), new RegExp(`^${literal(path)}: unexpected end of file`));
    expectOpError(() => addon.readInto(addon.zeros('f32', [10]), 0, path, 10_000, 'bf16', 1), new RegExp(`^${literal(path)}: unexpected end of file`));
  });

  it('refuses a read the file cannot complete before writing anything', () => {
    const t = addon.fromArray('f32', [14], new Float32Array(14).fill(-3));
    expectOpError(() => addon.readInto(t, 0, path, F32_AT, 'f32', 14), new RegExp(`^${literal(path)}: unexpected end of file: bytes \\[`));
    expectSame(floats(t), new Float32Array(14).fill(-3));
  });

  it('refuses offsets and counts a double cannot hold exactly, and non-string paths', () => {
    const t = addon.zeros('f32', [2, 16]), row = t.narrow(1, 1).view([16]);
    expectOpError(() => addon.readInto(row, 1e19, path, 0, 'f32', 1), /^readInto: dstOffset must be an integer of at most 2\^53 - 1/);
    expectOpError(() => addon.readInto(row, 0, path, 0, 'f32', 1e19), /^readInto: count must be an integer/);
    expectOpError(() => addon.readInto(row, 2 ** 52, path, 0, 'f32', 2 ** 52), /^readInto: elements \[4503599627370496, /);
    // A path object's toString could dispose dst while the binding holds it: only strings are taken.
    expectOpError(() => addon.readInto(row, 0, { toString: () => path } as never, 0, 'f32', 1), /^readInto: path must be a string/);
    expect(floats(t).every((v) => v === 0)).toBe(true);
  });

  it('rejects ranges past the tensor and dtype mismatches', () => {
    expectOpError(() => addon.readInto(addon.zeros('f32', [10]), 8, path, 0, 'f32', 5), /^readInto: elements \[8, 13\) do not fit in f32\[10\]/);
    expectOpError(() => addon.readInto(addon.zeros('f32', [10]), -1, path, 0, 'f32', 1), /^readInto: elements \[-1, 0\)/);
    expectOpError(() => addon.readInto(addon.zeros('f32', [10]), 0, path, 0, 'i32', 1), /^readInto: cannot store i32 data in a f32 tensor/);
    expectOpError(() => addon.readInto(addon.zeros('i32', [10]), 0, path, 0, 'i64', 1), /^readInto: cannot store i64 data in a i32 tensor/);
    expectOpError(() => addon.readInto(addon.zeros('f32', [10]), 0, path, 0, 'f8' as never, 1), /^readInto: unknown dtype 'f8'/);
  });
});
