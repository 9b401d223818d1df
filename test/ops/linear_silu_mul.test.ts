// linearSiluMul on the CPU: SiLU(gate) · up of a gate_up projection as one op, against the
// reference's linear then siluMul, and its argument checks.
import { describe, expect, it } from 'vitest';

import { addon, expectClose, expectOpError, f32, floats, weights } from './helpers.js';
import { Rng } from './random.js';
import * as ref from './reference.js';

describe('linearSiluMul', () => {
  // wider: columns a pool adds after W's own (not read)
  it.each([[1, 8, 5, false, 0], [3, 16, 12, true, 0], [2, 16, 10, false, 3]])(
    '%i rows, in %i, inter %i, bias %s, W %i columns wider', (n, inF, inter, withBias, wider) => {
      const rng = new Rng(n * 100 + inF + inter);
      const all = weights('bf16', [2 * inter, inF + wider], rng.floats(2 * inter * (inF + wider), -0.5, 0.5));
      const own = all.values.filter((_, i) => i % (inF + wider) < inF);
      const bias = withBias ? weights('f32', [2 * inter], rng.floats(2 * inter)) : null;
      const x = rng.floats(n * inF, -2, 2);
      const out = addon.empty('f32', [n, inter]);
      addon.linearSiluMul(out, f32([n, inF], x), all.tensor, bias?.tensor ?? null, addon.empty('f32', [n, 2 * inter]));
      expectClose(floats(out), ref.siluMul(ref.linear(x, own, bias?.values ?? null, n, inF, 2 * inter), n, inter));
    });

  it('rejects bad arguments, naming them', () => {
    const [n, inF, inter] = [2, 8, 4];
    const args = () => ({
      out: addon.zeros('f32', [n, inter]), x: addon.zeros('f32', [n, inF]), w: addon.zeros('bf16', [2 * inter, inF]),
      bias: null as ReturnType<typeof addon.zeros> | null, gateUp: addon.zeros('f32', [n, 2 * inter]),
    });
    const call = (o: Partial<ReturnType<typeof args>>) => {
      const a = { ...args(), ...o };
      addon.linearSiluMul(a.out, a.x, a.w, a.bias, a.gateUp);
    };
    expect(() => call({})).not.toThrow();
    const wShape = /^linearSiluMul: w .*must be \[gate and up rows of one count, at least x's 8 columns\]/;
    expectOpError(() => call({ w: addon.zeros('bf16', [2 * inter, inF - 1]) }), wShape);
    expectOpError(() => call({ w: addon.zeros('bf16', [7, inF]), gateUp: addon.zeros('f32', [n, 7]) }), wShape);
    expectOpError(() => call({ gateUp: addon.zeros('f32', [n, inter]) }), /^linearSiluMul: gateUp \(\[rows of x, w's rows\]\) must be \[2, 8\]/);
    expectOpError(() => call({ out: addon.zeros('f32', [n, 2 * inter]) }), /^linearSiluMul: out \(\[rows of x, half of w's rows\]\) must be \[2, 4\]/);
    expectOpError(() => call({ bias: addon.zeros('f32', [inter]) }), /^linearSiluMul: bias \(\[w's rows\]\) must be \[8\]/);
    expectOpError(() => call({ x: addon.zeros('f32', [n]) }), /^linearSiluMul: x /);
  });
});
