// rmsNormLinear on the CPU: a norm and the projection after it (plain, or gate_up's SiLU·mul)
// as one op, against the reference's rmsNorm then linear (then siluMul), and its argument checks.
import { describe, expect, it } from 'vitest';

import { addon, expectClose, expectOpError, f32, floats, weights } from './helpers.js';
import { Rng } from './random.js';
import * as ref from './reference.js';

const EPS = 1e-6;

describe('rmsNormLinear', () => {
  // wider: columns a pool adds after W's own (not read)
  it.each([
    [1, 8, 5, false, false, 0], [3, 16, 12, true, false, 0], [2, 16, 10, false, false, 3],
    [1, 8, 5, false, true, 0], [3, 16, 12, true, true, 2],
  ])('%i rows, in %i, out %i, bias %s, gated %s, W %i columns wider', (n, inF, outF, withBias, gated, wider) => {
    const rng = new Rng(n * 100 + inF + outF + (gated ? 7 : 0));
    const rows = gated ? 2 * outF : outF;
    const all = weights('bf16', [rows, inF + wider], rng.floats(rows * (inF + wider), -0.5, 0.5));
    const own = all.values.filter((_, i) => i % (inF + wider) < inF);
    const norm = weights('f32', [inF], rng.floats(inF, 0.5, 1.5));
    const bias = withBias ? weights('f32', [rows], rng.floats(rows)) : null;
    const res = rng.floats(n * inF, -2, 2);
    const out = addon.empty('f32', [n, outF]);
    const x = addon.empty('f32', [n, inF]);
    addon.rmsNormLinear(out, f32([n, inF], res), norm.tensor, EPS, all.tensor, bias?.tensor ?? null, x,
      ...(gated ? [addon.empty('f32', [n, rows])] : []));
    const projected = ref.linear(ref.rmsNorm(res, norm.values, EPS), own, bias?.values ?? null, n, inF, rows);
    expectClose(floats(out), gated ? ref.siluMul(projected, n, outF) : projected);
  });

  it('rejects bad arguments, naming them', () => {
    const [n, inF, outF] = [2, 8, 4];
    const args = () => ({
      out: addon.zeros('f32', [n, outF]), res: addon.zeros('f32', [n, inF]), norm: addon.zeros('f32', [inF]),
      w: addon.zeros('bf16', [outF, inF]), bias: null as ReturnType<typeof addon.zeros> | null, x: addon.zeros('f32', [n, inF]),
      gateUp: undefined as ReturnType<typeof addon.zeros> | undefined,
    });
    const call = (o: Partial<ReturnType<typeof args>>) => {
      const a = { ...args(), ...o };
      addon.rmsNormLinear(a.out, a.res, a.norm, EPS, a.w, a.bias, a.x, ...(a.gateUp ? [a.gateUp] : []));
    };
    expect(() => call({})).not.toThrow();
    expect(() => call({ w: addon.zeros('bf16', [2 * outF, inF]), gateUp: addon.zeros('f32', [n, 2 * outF]) })).not.toThrow();
    expectOpError(() => call({ norm: addon.zeros('f32', [inF + 1]) }), /^rmsNormLinear: normW \(\[residual's columns\]\) must be \[8\]/);
    expectOpError(() => call({ w: addon.zeros('bf16', [outF, inF - 1]) }), /^rmsNormLinear: w .*must be \[out, at least residual's 8 columns\]/);
    expectOpError(() => call({ w: addon.zeros('bf16', [7, inF]), gateUp: addon.zeros('f32', [n, 7]) }),
      /^rmsNormLinear: w .*must be \[gate and up rows of one count, at least residual's 8 columns\]/);
    expectOpError(() => call({ out: addon.zeros('f32', [n, outF + 1]) }), /^rmsNormLinear: out \(\[rows of residual, w's rows\]\) must be \[2, 4\]/);
    expectOpError(() => call({ gateUp: addon.zeros('f32', [n, 2 * outF]) }),
      /^rmsNormLinear: out \(\[rows of residual, half of w's rows\]\) must be \[2, 2\]/);
    expectOpError(() => call({ x: addon.zeros('f32', [n + 1, inF]) }), /^rmsNormLinear: x \(residual's shape\) must be \[2, 8\]/);
    expectOpError(() => call({ bias: addon.zeros('f32', [outF + 1]) }), /^rmsNormLinear: bias \(\[w's rows\]\) must be \[4\]/);
    expectOpError(() => call({ res: addon.zeros('f32', [n]) }), /^rmsNormLinear: residual /);
  });
});
