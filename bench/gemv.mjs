// The decode GEMV alone on the GPU machine: Qwen3-8B's and Qwen3-0.6B's projections at 1 and
// 4 rows, each timed inside a captured graph (as a decode step runs it: no launch gaps) over
// enough copies of its weight that they pass L2 (a step reads its weights from HBM), against
// the HBM read bandwidth measured by cudaReadBandwidth in the same process:
//
//   node bench/gemv.mjs
//
// Needs dist/ and the addon (as bench/gpu_session.sh). Prints µs per GEMV and its share of
// the measured bandwidth.
import { addon } from '../dist/lib/addon/index.js';
import { copiesPast, graphTimedUs } from './graph_timing.mjs';

const SHAPES = [
  ['8B qkv', 4096, 6144], ['8B o', 4096, 4096], ['8B gate_up', 4096, 24576], ['8B down', 12288, 4096],
  ['0.6B qkv', 1024, 4096], ['0.6B o', 2048, 1024], ['0.6B gate_up', 1024, 6144], ['0.6B down', 3072, 1024],
];
const L2_PAST = 256 * 2 ** 20;  // bytes of weight copies cycled: several times the H200's 50 MB L2

const gbps = addon.cudaReadBandwidth(2 ** 31, 5);
console.log(`HBM read bandwidth: ${gbps.toFixed(0)} GB/s`);
const wave = (n) => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.37) * 0.02);
for (const [name, inF, outF] of SHAPES) {
  const bytes = inF * outF * 2;
  const one = addon.fromArray('bf16', [outF, inF], wave(outF * inF), 'cuda');
  const ws = copiesPast(one, L2_PAST);
  for (const n of [1, 4]) {
    const x = addon.fromArray('bf16', [n, inF], wave(n * inF), 'cuda');
    const out = addon.empty('bf16', [n, outF], 'cuda');
    const us = graphTimedUs(ws.length, (i) => addon.linear(out, x, ws[i], null));
    const achieved = bytes / (us * 1e-6) / 1e9;
    console.log(`${name.padEnd(13)} ${String(inF).padStart(5)} -> ${String(outF).padEnd(5)} n=${n}: ${us.toFixed(2).padStart(7)} us, ` +
      `${achieved.toFixed(0).padStart(4)} GB/s, ${((achieved / gbps) * 100).toFixed(1)}% of measured`);
    x.dispose();
    out.dispose();
  }
  for (const w of ws) w.dispose();
  one.dispose();
}
