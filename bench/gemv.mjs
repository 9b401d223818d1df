// The decode projections alone on the GPU machine: Qwen3-8B's and Qwen3-0.6B's at the rows
// ROWS names (default 1 and 4; linear picks the kernel: the GEMV for 1 row, the tensor-core
// GEMV for 2-4 rows (of 0.6B's weights up to 16, or 32 where out <= in), cuBLASLt above),
// each timed inside a captured graph (as a decode step runs it: no launch gaps) over enough
// copies of its weight that they pass L2 (a step reads its weights from HBM), against the
// HBM read bandwidth measured by cudaReadBandwidth in the same process:
//
//   [ROWS=1,4,8,32] [EXT=1] node bench/gemv.mjs
//
// EXT=1 also times each projection as one adapter runs it at decode sizes: by its extended
// weight (every slot's A beneath W, b beside it: 2 slots of rank 16, as bench/gpu_session.sh
// serves), out + 2·16·slices rows read with the wider stride. Needs dist/ and the addon (as
// bench/gpu_session.sh). EXT_GRID=below:cols,... times, instead, each projection with `below`
// rows beneath W and `cols` columns beside it (which of the two changes cuBLASLt's choice);
// ONLY=8B the shapes whose name has it (the lm_heads, 151936 outputs, are among them:
// ONLY=lm_head for those alone). Prints µs per projection and its share of the measured
// bandwidth.
import { addon } from '../dist/lib/addon/index.js';
import { copiesPast, graphTimedUs } from './graph_timing.mjs';

// [name, in, out, slices] (slices: the fused projection's outputs an adapter has a b for)
const SHAPES = [
  ['8B qkv', 4096, 6144, 3], ['8B o', 4096, 4096, 1], ['8B gate_up', 4096, 24576, 2], ['8B down', 12288, 4096, 1],
  ['0.6B qkv', 1024, 4096, 3], ['0.6B o', 2048, 1024, 1], ['0.6B gate_up', 1024, 6144, 2], ['0.6B down', 3072, 1024, 1],
  ['8B lm_head', 4096, 151936, 0], ['0.6B lm_head', 1024, 151936, 0],  // no adapter: EXT adds nothing
];
const ROWS = (process.env.ROWS ?? '1,4').split(',').map(Number);
const EXT_PER_SLICE = process.env.EXT === '1' ? 2 * 16 : 0;  // slots × rank
const GRID = process.env.EXT_GRID?.split(',').map((p) => p.split(':').map(Number));
const L2_PAST = 256 * 2 ** 20;  // bytes of weight copies cycled: several times the H200's 50 MB L2

const gbps = addon.cudaReadBandwidth(2 ** 31, 5);
console.log(`HBM read bandwidth: ${gbps.toFixed(0)} GB/s`);
const wave = (n) => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.37) * 0.02);
// A [rows, cols] bf16 weight of wave values, written a tile of rows at a time (lm_head's
// 600M elements would not fit one JS array).
function filled(rows, cols) {
  const tileRows = Math.min(rows, Math.floor(2 ** 24 / cols));
  const tile = addon.fromArray('bf16', [tileRows, cols], wave(tileRows * cols), 'cuda');
  const w = addon.empty('bf16', [rows, cols], 'cuda');
  for (let r = 0; r < rows; r += tileRows) {
    if (rows - r < tileRows) {
      const last = addon.fromArray('bf16', [rows - r, cols], wave((rows - r) * cols), 'cuda');
      addon.copyRegion(w, last, r, 0, 1, false);
      last.dispose();
    } else addon.copyRegion(w, tile, r, 0, 1, false);
  }
  tile.dispose();
  return w;
}
for (const [name, inF, outF, slices] of SHAPES.filter(([name]) => name.includes(process.env.ONLY ?? ''))) {
  const extra = EXT_PER_SLICE * slices;
  for (const [below, cols] of GRID ?? (extra ? [[0, 0], [extra, extra]] : [[0, 0]])) {
    // the extended weight [out + below, in + cols] read over its first in columns
    const rows = outF + below, bytes = inF * rows * 2;
    const one = filled(rows, inF + cols);
    const ws = copiesPast(one, L2_PAST);
    for (const n of ROWS) {
      const x = addon.fromArray('bf16', [n, inF], wave(n * inF), 'cuda');  // its first in columns: W's, then A's
      const out = addon.empty('bf16', [n, rows], 'cuda');
      const us = graphTimedUs(ws.length, (i) => addon.linear(out, x, ws[i], null, false, 0));
      const achieved = bytes / (us * 1e-6) / 1e9;
      const label = below || cols ? `${name} +${below}:${cols}` : name;
      console.log(`${label.padEnd(19)} ${String(inF).padStart(5)} -> ${String(rows).padEnd(5)} n=${String(n).padEnd(2)}: ` +
        `${us.toFixed(2).padStart(7)} us, ${achieved.toFixed(0).padStart(4)} GB/s, ${((achieved / gbps) * 100).toFixed(1)}% of measured`);
      x.dispose();
      out.dispose();
    }
    for (const w of ws) w.dispose();
    one.dispose();
  }
}
