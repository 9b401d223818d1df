import { describe, expect, it } from 'vitest';

import { Rng } from '../../lib/synth/rng.js';

describe('Rng', () => {
  it('gives the same stream as it always has (synthetic weights and bench loads stay reproducible across versions)', () => {
    const r = new Rng(1, 2);
    expect(Array.from({ length: 6 }, () => r.u32())).toEqual([2383426771, 1062683772, 3863502796, 1657842656, 1835646405, 3902300336]);
    expect(new Rng(0xdeadbeef, 7).u32()).toBe(1810339525);
  });

  it('fillFromTable indexes the table with the low then the high half of the words u32() gives, and goes on where it stops', () => {
    const identity = Uint16Array.from({ length: 65536 }, (_, i) => i);
    const a = new Rng(3, 4), b = new Rng(3, 4);
    const out = new Uint16Array(2 * 5000);
    a.fillFromTable(out, identity);
    for (let i = 0; i < out.length; i += 2) {
      const w = b.u32();
      expect([out[i], out[i + 1]]).toEqual([w & 0xffff, w >>> 16]);
    }
    expect(a.u32()).toBe(b.u32());
    expect(() => a.fillFromTable(new Uint16Array(3), identity)).toThrow(/even-length/);
  });
});
