// Row gathers and element-wise ops: embedding, siluMul, add, gatherRows, feedTokens.
import { describe, expect, it } from 'vitest';

import { addon, expectClose, expectOpError, expectSame, f32, FLOAT_DTYPES, floats, i32, ODD_SIZES, weights } from './helpers.js';
import { Rng } from './random.js';
import * as ref from './reference.js';

describe('embedding', () => {
  describe.each(FLOAT_DTYPES)('%s table', (dtype) => {
    it.each(ODD_SIZES)('dim %i: looks up rows exactly, repeats and out of order', (dim) => {
      const rng = new Rng(dim * 31 + dtype.length);
      const vocab = 37;
      const table = weights(dtype, [vocab, dim], rng.floats(vocab * dim, -4, 4));
      const ids = [5, 0, 36, 5, 17, 1, 36];
      const out = addon.empty('f32', [ids.length, dim]);
      addon.embedding(out, table.tensor, i32([ids.length], ids));
      expectSame(floats(out), ref.embedding(table.values, dim, ids));
    });
  });

  it('takes ids of any shape', () => {
    const table = weights('bf16', [10, 3], new Rng(1).floats(30));
    const ids = [[1, 2], [9, 0]];
    const out = addon.empty('f32', [4, 3]);
    addon.embedding(out, table.tensor, i32([2, 2], ids.flat()));
    expectSame(floats(out), ref.embedding(table.values, 3, ids.flat()));
  });

  it('rejects bad arguments, naming them', () => {
    const table = addon.zeros('bf16', [10, 4]);
    const out = addon.empty('f32', [2, 4]);
    expectOpError(() => addon.embedding(out, table, i32([2], [3, 10])), /^embedding: ids\[1\] = 10 is outside \[0, 10\)/);
    expectOpError(() => addon.embedding(out, table, i32([2], [-1, 0])), /^embedding: ids\[0\] = -1/);
    expectOpError(() => addon.embedding(out, table, f32([2], [0, 1])), /^embedding: ids must be i32/);
    expectOpError(() => addon.embedding(addon.empty('f32', [2, 5]), table, i32([2], [0, 1])), /^embedding: out must be \[2, 4\]/);
    expectOpError(() => addon.embedding(out, addon.zeros('i32', [10, 4]), i32([2], [0, 1])), /^embedding: table must be f32, bf16 or f16/);
    expectOpError(() => addon.embedding(out, table, null as never), /^embedding: ids must be a Tensor/);
  });
});

describe('siluMul', () => {
  it.each([
    [1, 1],
    [1, 130],
    [7, 33],
    [33, 7],
  ])('n %i, inter %i: silu(gate) * up with gate the first half of each row', (n, inter) => {
    const rng = new Rng(n * 1000 + inter);
    const gateUp = rng.floats(n * 2 * inter, -8, 8);
    const out = addon.empty('f32', [n, inter]);
    addon.siluMul(out, f32([n, 2 * inter], gateUp));
    expectClose(floats(out), ref.siluMul(gateUp, n, inter));
  });

  it('stays finite for large |gate|', () => {
    const gateUp = [-100, -30, 30, 100, 2, 3, 4, 5];
    const out = addon.empty('f32', [1, 4]);
    addon.siluMul(out, f32([1, 8], gateUp));
    expectClose(floats(out), ref.siluMul(gateUp, 1, 4));
  });

  it('rejects bad arguments, naming them', () => {
    expectOpError(() => addon.siluMul(addon.empty('f32', [2, 3]), addon.zeros('f32', [2, 7])), /^siluMul: gateUp .* must have an even width/);
    expectOpError(() => addon.siluMul(addon.empty('f32', [2, 4]), addon.zeros('f32', [2, 6])), /^siluMul: out must be \[2, 3\]/);
    expectOpError(() => addon.siluMul(addon.empty('f32', [2, 3]), addon.zeros('bf16', [2, 6])), /^siluMul: gateUp must be f32/);
  });
});

describe('add', () => {
  it.each(ODD_SIZES)('%i elements: exact f32 sums, also in place', (n) => {
    const rng = new Rng(n + 7);
    const a = rng.floats(n * 3, -100, 100);
    const b = rng.floats(n * 3, -100, 100);
    const want = Float32Array.from(ref.add(a, b));
    const out = addon.empty('f32', [3, n]);
    addon.add(out, f32([3, n], a), f32([3, n], b));
    expectSame(floats(out), want);

    const inPlace = f32([3, n], a);
    addon.add(inPlace, inPlace, f32([3, n], b));
    expectSame(floats(inPlace), want);
  });

  it('rejects bad arguments, naming them', () => {
    const x = addon.zeros('f32', [4]);
    expectOpError(() => addon.add(x, x, addon.zeros('f32', [5])), /^add: a f32\[4\], b f32\[5\] and out f32\[4\] must have as many elements/);
    expectOpError(() => addon.add(x, addon.zeros('bf16', [4]), x), /^add: a must be f32, got bf16\[4\]/);
    expectOpError(() => addon.add(addon.zeros('i32', [4]), x, x), /^add: out must be f32/);
  });
});

describe('gatherRows', () => {
  it.each(ODD_SIZES)('dim %i: copies the chosen rows in order, repeats allowed', (dim) => {
    const rng = new Rng(dim * 3);
    const rows = 9;
    const x = rng.floats(rows * dim);
    const indices = [8, 0, 3, 3, 8];
    const out = addon.empty('f32', [indices.length, dim]);
    addon.gatherRows(out, f32([rows, dim], x), i32([indices.length], indices));
    expectSame(floats(out), ref.gatherRows(x, dim, indices));
  });

  it('rejects bad arguments, naming them', () => {
    const x = addon.zeros('f32', [4, 3]);
    const out = addon.empty('f32', [2, 3]);
    expectOpError(() => addon.gatherRows(out, x, i32([2], [0, 4])), /^gatherRows: indices\[1\] = 4 is outside \[0, 4\)/);
    expectOpError(() => addon.gatherRows(out, x, i32([2], [-2, 0])), /^gatherRows: indices\[0\] = -2/);
    expectOpError(() => addon.gatherRows(addon.empty('f32', [3, 3]), x, i32([2], [0, 1])), /^gatherRows: out must be \[2, 3\]/);
    expectOpError(() => addon.gatherRows(out, addon.zeros('f32', [12]), i32([2], [0, 1])), /^gatherRows: x must have 2 dims/);
  });
});

describe('feedTokens', () => {
  it('takes the rows with a source from the samples, with their embedding rows, and leaves the others', () => {
    const tokens = i32([4], [7, 8, 9, 10]), embedRows = i32([4], [1, 2, 3, 4]);
    addon.feedTokens(tokens, embedRows, i32([3], [30, 31, 32]), i32([4], [-1, 2, 0, -1]), i32([4], [0, 1, 2, 3]), 100);
    expect([...tokens.toArray()]).toEqual([7, 32, 30, 10]);
    expect([...embedRows.toArray()]).toEqual([1, 132, 230, 4]);
  });

  it('rejects bad arguments, naming them', () => {
    const t = () => i32([2], [0, 0]);
    expectOpError(() => addon.feedTokens(t(), t(), i32([1], [5]), i32([2], [0, 1]), t(), 10), /^feedTokens: from\[1\] = 1 is past the 1 samples/);
    expectOpError(() => addon.feedTokens(t(), t(), t(), i32([3], [0, 0, 0]), t(), 10), /^feedTokens: from i32\[3\] must have one entry per token/);
    expectOpError(() => addon.feedTokens(f32([2], [0, 0]), t(), t(), t(), t(), 10), /^feedTokens: tokens must be i32/);
    expectOpError(() => addon.feedTokens(t(), t(), t(), t(), t(), 0), /^feedTokens: vocab must be an integer >= 1/);
  });
});
