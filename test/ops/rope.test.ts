// rope: rotate-half rotary embedding of the q and k heads of fused qkv rows.
import { describe, expect, it } from 'vitest';

import { addon, expectClose, expectOpError, expectSame, f32, floats, i32 } from './helpers.js';
import { Rng } from './random.js';
import * as ref from './reference.js';
import type { HeadLayout } from './reference.js';

/** Llama-style inverse frequencies for `half` rotated pairs: base^(-i / half). */
function invFreqs(half: number, base = 10000): Float32Array {
  return Float32Array.from({ length: half }, (_, i) => base ** (-i / half));
}

interface Case extends HeadLayout {
  half: number;
  name: string;
}

const CASES: Case[] = [
  { name: 'full, hd 2', numHeads: 1, numKvHeads: 1, headDim: 2, half: 1 },
  { name: 'full, hd 34 (odd half)', numHeads: 4, numKvHeads: 2, headDim: 34, half: 17 },
  { name: 'full, hd 130', numHeads: 2, numKvHeads: 1, headDim: 130, half: 65 },
  { name: 'partial, hd 7', numHeads: 4, numKvHeads: 1, headDim: 7, half: 3 },
  { name: 'partial, hd 33', numHeads: 4, numKvHeads: 2, headDim: 33, half: 8 },
  { name: 'partial, hd 130, one pair', numHeads: 2, numKvHeads: 2, headDim: 130, half: 1 },
];

describe('rope', () => {
  it.each(CASES)('$name: H $numHeads, K $numKvHeads', (c) => {
    const rng = new Rng(c.headDim * 7 + c.half);
    const n = 7;
    const width = ref.rowWidth(c);
    const qkv = rng.floats(n * width, -2, 2);
    const positions = [0, 1, 2, 7, 100, 513, 4095];
    const invFreq = invFreqs(c.half);
    const t = f32([n, width], qkv);
    addon.rope(t, i32([n], positions), f32([c.half], invFreq), c.numHeads, c.numKvHeads, c.headDim);
    const got = floats(t);
    expectClose(got, ref.rope(qkv, positions, invFreq, c));

    // Bit-exact where nothing rotates: position 0, dims past 2 * half, and every v head.
    expectSame(got.subarray(0, width), qkv.subarray(0, width));
    for (let r = 0; r < n; ++r)
      for (let h = 0; h < c.numHeads + 2 * c.numKvHeads; ++h) {
        const at = r * width + h * c.headDim;
        const from = h < c.numHeads + c.numKvHeads ? 2 * c.half : 0;
        expectSame(got.subarray(at + from, at + c.headDim), qkv.subarray(at + from, at + c.headDim));
      }
  });

  it('pairs dim i with dim i + half: a quarter turn', () => {
    // One head of 4 dims, half 2, invFreq [pi/2, 0]: position 1 turns pair (0, 2) by 90 degrees, pair (1, 3) not at all.
    const l = { numHeads: 1, numKvHeads: 1, headDim: 4 };
    const t = f32([1, 12], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    addon.rope(t, i32([1], [1]), f32([2], [Math.PI / 2, 0]), l.numHeads, l.numKvHeads, l.headDim);
    const got = Array.from(floats(t), (v) => Math.round(v * 1e5) / 1e5);
    expect(got).toEqual([-3, 2, 1, 4, -7, 6, 5, 8, 9, 10, 11, 12]);
  });

  it('rejects bad arguments, naming them', () => {
    const qkv = addon.zeros('f32', [3, 4 * 8]); // H 2, K 1, hd 8
    const pos = i32([3], [0, 1, 2]);
    const inv = f32([4], invFreqs(4));
    expectOpError(() => addon.rope(qkv, pos, f32([5], invFreqs(5)), 2, 1, 8), /^rope: invFreq has 5 entries; the rotary dims \(2x that\) must fit in headDim 8/);
    expectOpError(() => addon.rope(qkv, pos, f32([0], []), 2, 1, 8), /^rope: invFreq has 0 entries/);
    expectOpError(() => addon.rope(qkv, i32([2], [0, 1]), inv, 2, 1, 8), /^rope: positions must be \[3\]/);
    expectOpError(() => addon.rope(qkv, f32([3], [0, 1, 2]), inv, 2, 1, 8), /^rope: positions must be i32/);
    expectOpError(() => addon.rope(qkv, pos, addon.zeros('bf16', [4]), 2, 1, 8), /^rope: invFreq must be f32/);
    expectOpError(() => addon.rope(qkv, pos, inv, 2, 2, 8), /^rope: qkv f32\[3, 32\] must have at least \(numHeads \+ 2 \* numKvHeads\) \* headDim = 48 columns/);
    expectOpError(() => addon.rope(qkv, pos, inv, 2, 0, 8), /^rope: numKvHeads must be an integer >= 1/);
    expect(floats(qkv).every((v) => v === 0)).toBe(true);
  });
});
