// The adapter's decode kernels alone on the GPU machine, beside the plain ops they replace:
// rmsNorm + shrink (qkv's and gate_up's inputs), SiLU·mul + shrink (down's) and o's shrink,
// each making the wide rows a step's GEMMs read, on Qwen3-0.6B's and Qwen3-8B's shapes at
// rank 16 with two adapter slots, every row on one adapter. Each op is timed inside a
// captured graph (as a decode step runs it) over copies of A that together pass L2 (a step
// finds A evicted by the weights):
//
//   node bench/lora_ops.mjs
//
// Needs dist/ and the addon (as bench/gpu_session.sh). Prints µs per op.
import { addon } from '../dist/lib/addon/index.js';
import { copiesPast, graphTimedUs } from './graph_timing.mjs';

const MODELS = [['0.6B', 1024, 3072, 2048], ['8B', 4096, 12288, 4096]];  // hidden, intermediate, o's input
const ROWS = (process.env.ROWS ?? '1,4,8,16,32,64').split(',').map(Number);
const SLOTS = 3, R = 16, L2_PAST = 128 * 2 ** 20;

const wave = (n, phase = 0) => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.37 + phase) * 0.5);
const bf16 = (shape, phase) => addon.fromArray('bf16', shape, wave(shape.reduce((a, b) => a * b, 1), phase), 'cuda');

/** Copies of A [SLOTS, rankRows, inF] past L2. */
function aCopies(rankRows, inF) {
  const one = bf16([SLOTS * rankRows, inF], 1);
  const copies = copiesPast(one, L2_PAST, 4);
  one.dispose();
  return copies.map((a) => {
    const view = a.view([SLOTS, rankRows, inF]);
    a.dispose();
    return view;
  });
}

for (const [model, hidden, inter, oIn] of MODELS) {
  const norm = bf16([hidden], 2);
  const aQkv = aCopies(3 * R, hidden), aGu = aCopies(2 * R, hidden), aDown = aCopies(R, inter), aO = aCopies(R, oIn);
  for (const n of ROWS) {
    const slots = addon.fromArray('i32', [n], Int32Array.from({ length: n }, () => 1), 'cuda');
    const x = bf16([n, hidden], 3), gateUp = bf16([n, 2 * inter], 4), attn = bf16([n, oIn], 5);
    const plain = addon.empty('bf16', [n, hidden], 'cuda'), act = addon.empty('bf16', [n, inter], 'cuda');
    const wide = (inF, rankRows) => addon.empty('bf16', [n, inF + SLOTS * rankRows], 'cuda');
    const wQkv = wide(hidden, 3 * R), wGu = wide(hidden, 2 * R), wDown = wide(inter, R), wO = wide(oIn, R);
    const us = {
      rmsNorm: graphTimedUs(64, () => addon.rmsNorm(plain, x, norm, 1e-6)),
      'rmsNorm+shrink qkv': graphTimedUs(aQkv.length, (i) => addon.rmsNormShrink(wQkv, x, norm, 1e-6, null, aQkv[i], slots)),
      'rmsNorm+shrink gate_up': graphTimedUs(aGu.length, (i) => addon.rmsNormShrink(wGu, x, norm, 1e-6, null, aGu[i], slots)),
      siluMul: graphTimedUs(64, () => addon.siluMul(act, gateUp)),
      'siluMul+shrink down': graphTimedUs(aDown.length, (i) => addon.siluMulShrink(wDown, gateUp, null, aDown[i], slots)),
      'shrink o': graphTimedUs(aO.length, (i) => addon.loraShrink(wO, attn, aO[i], slots)),
    };
    console.log(`${model} n=${String(n).padStart(2)}: ` + Object.entries(us).map(([k, v]) => `${k} ${v.toFixed(2)}`).join(', '));
    for (const t of [slots, x, gateUp, attn, plain, act, wQkv, wGu, wDown, wO]) t.dispose();
  }
  for (const a of [...aQkv, ...aGu, ...aDown, ...aO, norm]) a.dispose();
}
