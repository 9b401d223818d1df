import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { RopeConfig } from '../../lib/checkpoint/config.js';
import { ropeInvFreq } from '../../lib/models/rope.js';

interface TorchCase {
  rope: RopeConfig;
  headDim: number;
  invFreq: number[];
}
const TORCH: { cases: TorchCase[] } = JSON.parse(
  readFileSync(new URL('./fixtures/rope_torch.json', import.meta.url), 'utf8'));

/** The textbook formulas in plain float64, independent of the float32 mirroring under test. */
function reference(rope: RopeConfig, headDim: number): { inv: number[]; bands: Set<string> } {
  const dim = Math.floor(headDim * rope.partialRotaryFactor);
  const inv: number[] = [];
  const bands = new Set<string>();
  for (let i = 0; i < dim / 2; i++) {
    const base = 1 / Math.pow(rope.theta, (2 * i) / dim);
    if (rope.type === 'default') {
      inv.push(base);
    } else if (rope.type === 'linear') {
      inv.push(base / rope.factor!);
    } else {
      const old = rope.originalMaxPositionEmbeddings!;
      const low = rope.lowFreqFactor!;
      const high = rope.highFreqFactor!;
      const wavelen = (2 * Math.PI) / base;
      if (wavelen < old / high) {
        bands.add('high');
        inv.push(base);
      } else if (wavelen > old / low) {
        bands.add('low');
        inv.push(base / rope.factor!);
      } else {
        bands.add('medium');
        const s = (old / wavelen - low) / (high - low);
        inv.push((1 - s) * (base / rope.factor!) + s * base);
      }
    }
  }
  return { inv, bands };
}

function expectClose(actual: Float32Array, expected: number[]): void {
  expect(actual.length).toBe(expected.length);
  actual.forEach((a, i) => {
    expect(Math.abs(a - expected[i]) / Math.abs(expected[i])).toBeLessThan(1e-6);
  });
}

describe('ropeInvFreq', () => {
  it('default RoPE (Qwen3: theta 1e6, head_dim 128)', () => {
    const rope: RopeConfig = { theta: 1_000_000, type: 'default', partialRotaryFactor: 1 };
    const { invFreq, rotaryDim } = ropeInvFreq(rope, 128);
    expect(rotaryDim).toBe(128);
    expect(invFreq[0]).toBe(1);
    expectClose(invFreq, reference(rope, 128).inv);
  });

  it('values are float32-rounded like torch', () => {
    const { invFreq } = ropeInvFreq({ theta: 10000, type: 'default', partialRotaryFactor: 1 }, 64);
    for (const v of invFreq) expect(Math.fround(v)).toBe(v);
    // 1 / 10000^(2/64) rounded to float32 once at each step torch rounds
    expect(invFreq[1]).toBe(Math.fround(1 / Math.fround(Math.pow(10000, Math.fround(2 / 64)))));
  });

  it('Llama 3.1 scaling with the published parameters', () => {
    const rope: RopeConfig = {
      theta: 500000, type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4,
      originalMaxPositionEmbeddings: 8192, partialRotaryFactor: 1,
    };
    const ref = reference(rope, 128);
    expect(ref.bands).toEqual(new Set(['high', 'medium', 'low']));
    expectClose(ropeInvFreq(rope, 128).invFreq, ref.inv);
  });

  it('Llama 3 scaling with a small original context: all three bands in a 16-wide head', () => {
    // wavelengths 2π·10000^(i/8): 6.3 (high) | 19.3, 62.8 (medium, between 16 and 64) | 198 … (low)
    const rope: RopeConfig = {
      theta: 10000, type: 'llama3', factor: 4, lowFreqFactor: 1, highFreqFactor: 4,
      originalMaxPositionEmbeddings: 64, partialRotaryFactor: 1,
    };
    const ref = reference(rope, 16);
    expect(ref.bands).toEqual(new Set(['high', 'medium', 'low']));
    const { invFreq } = ropeInvFreq(rope, 16);
    expectClose(invFreq, ref.inv);
    const unscaled = ropeInvFreq({ theta: 10000, type: 'default', partialRotaryFactor: 1 }, 16).invFreq;
    expect(invFreq[0]).toBe(unscaled[0]); // high band untouched
    expect(invFreq[7]).toBe(Math.fround(unscaled[7] / 4)); // low band divided by factor
    expect(invFreq[1]).toBeLessThan(unscaled[1]); // medium band between the two
    expect(invFreq[1]).toBeGreaterThan(unscaled[1] / 4);
  });

  it('linear scaling divides by the factor', () => {
    const rope: RopeConfig = { theta: 10000, type: 'linear', factor: 4, partialRotaryFactor: 1 };
    expectClose(ropeInvFreq(rope, 64).invFreq, reference(rope, 64).inv);
  });

  it('partial rotary factor rotates only part of the head', () => {
    const rope: RopeConfig = { theta: 10000, type: 'default', partialRotaryFactor: 0.25 };
    const { invFreq, rotaryDim } = ropeInvFreq(rope, 256);
    expect(rotaryDim).toBe(64);
    expectClose(invFreq, reference(rope, 256).inv);
    expect(() => ropeInvFreq({ ...rope, partialRotaryFactor: 0.5 }, 6)).toThrow(/must be even/);
  });

  it('matches torch float32 to the bit, but for powf rounding (≤ 1 ulp)', () => {
    let exact = 0;
    let total = 0;
    for (const c of TORCH.cases) {
      const got = new Uint32Array(ropeInvFreq(c.rope, c.headDim).invFreq.buffer);
      const want = new Uint32Array(Float32Array.from(c.invFreq).buffer);
      expect(got.length).toBe(want.length);
      got.forEach((bits, i) => {
        expect(Math.abs(bits - want[i])).toBeLessThanOrEqual(1);
        if (bits === want[i]) exact++;
        total++;
      });
    }
    expect(exact).toBeGreaterThanOrEqual(total - 2);
  });
});
