// The adapter's decode ops alone on the GPU machine, beside the plain ops of a LoRA-off step:
// each projection's GEMM by W with every slot's A beneath (its output then carries the
// input's shrink), and the ops that take those outputs adding each row's delta (ropeKvWrite
// for qkv, siluMul for gate_up, addRmsNorm for o and down), on Qwen3-0.6B's and Qwen3-8B's
// shapes at rank 16 with three slots (slot 0 included), every row on slot 1. Each op is timed
// inside a captured graph (as a decode step runs it) over copies of its weight that together
// pass L2 (a step finds them evicted by the other weights):
//
//   node bench/lora_ops.mjs        (ROWS=1,8,32 by default; MODEL=0.6B or 8B: that model only)
//
// PAIRS=1 also times each consumer after its projection's GEMM, as a step runs them (above 4
// rows the GEMM is cuBLASLt's, which does not let the next kernel start early): GEMM + plain
// op against extended GEMM + op with its delta, and the same with one bT that the GEMMs' weights
// may or may not have evicted (what a prefetch of bT that survives the GEMM could give at most).
//
// Needs dist/ and the addon (as bench/gpu_session.sh). Prints µs per op, plain / adapted.
import { addon } from '../dist/lib/addon/index.js';
import { copiesPast, graphTimedUs } from './graph_timing.mjs';

// hidden, intermediate, q heads, kv heads, head dim
const MODELS = [['0.6B', 1024, 3072, 16, 8, 128], ['8B', 4096, 12288, 32, 8, 128]]
  .filter(([name]) => !process.env.MODEL || name === process.env.MODEL);
const ROWS = (process.env.ROWS ?? '1,8,32').split(',').map(Number);
const SLOTS = 3, R = 16, L2_PAST = 256 * 2 ** 20, EPS = 1e-6;

const wave = (n, phase = 0) => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.37 + phase) * 0.05);
const bf16 = (shape, phase) => addon.fromArray('bf16', shape, wave(shape.reduce((a, b) => a * b, 1), phase), 'cuda');
const i32 = (values) => addon.fromArray('i32', [values.length], Int32Array.from(values), 'cuda');

/** A projection [out, inF] of `slices` slices (starts): W with every slot's A beneath (b beside), and bT. */
function projection(inF, starts) {
  const out = starts.at(-1), slices = starts.length - 1, bCols = SLOTS * slices * R;
  const width = Math.ceil((inF + bCols) / 64) * 64;
  const copies = copiesPast(bf16([out + bCols, width], 1), L2_PAST, 4);
  return {
    out, bCols, inF, copies, plain: copies.map((c) => c.narrow(0, out)), bTs: copiesPast(bf16([bCols, out], 2), L2_PAST, 4),
    starts: Int32Array.from(starts), ranks: addon.fromArray('i32', [SLOTS, slices], new Int32Array(SLOTS * slices).fill(R), 'cuda'),
  };
}

for (const [model, hidden, inter, H, K, hd] of MODELS) {
  const qkvW = (H + 2 * K) * hd;
  const qkv = projection(hidden, [0, H * hd, (H + K) * hd, qkvW]);
  const o = projection(H * hd, [0, hidden]);
  const gu = projection(hidden, [0, inter, 2 * inter]);
  const down = process.env.PAIRS === '1' ? projection(inter, [0, hidden]) : undefined;
  const norm = bf16([hidden], 2), headNorm = bf16([hd], 7), invFreq = addon.fromArray('f32', [hd / 2], wave(hd / 2), 'cuda');
  const blocks = 64, cacheShape = [blocks, 16, K, hd];
  const kCache = addon.empty('bf16', cacheShape, 'cuda'), vCache = addon.empty('bf16', cacheShape, 'cuda');
  for (const n of ROWS) {
    const rowSlots = i32(Array(n).fill(1)), positions = i32(Array.from({ length: n }, (_, i) => i));
    const slots = i32(Array.from({ length: n }, (_, i) => i)), x = bf16([n, hidden], 3), attn = bf16([n, H * hd], 4);
    const residual = bf16([n, hidden], 5), out = addon.empty('bf16', [n, hidden], 'cuda');
    const act = addon.empty('bf16', [n, inter], 'cuda');
    const wide = (p) => bf16([n, p.out + p.bCols], 6);
    const yQkv = wide(qkv), yO = wide(o), yGu = wide(gu);
    const delta = (p, i) => [p.bTs[i], rowSlots, p.starts, p.ranks];
    const timed = (p, op) => graphTimedUs(p.copies.length, op), timedDelta = (p, op) => graphTimedUs(p.bTs.length, op);
    const rope = (y, ...d) => addon.ropeKvWrite(y, positions, invFreq, kCache, vCache, slots, headNorm, headNorm, H, K, hd, EPS, ...d);
    const plainQkv = bf16([n, qkvW], 8), plainGu = bf16([n, 2 * inter], 9);
    const pairs = {
      'qkv GEMM': [timed(qkv, (i) => addon.linear(plainQkv, x, qkv.plain[i], null, false, 0)),
        timed(qkv, (i) => addon.linear(yQkv, x, qkv.copies[i], null, false, 0))],
      'ropeKvWrite': [graphTimedUs(64, () => rope(plainQkv)), timedDelta(qkv, (i) => rope(yQkv, ...delta(qkv, i)))],
      addRmsNorm: [graphTimedUs(64, () => addon.addRmsNorm(residual, out, norm, EPS, x)),
        timedDelta(o, (i) => addon.addRmsNorm(residual, yO, norm, EPS, x, ...delta(o, i)))],
      siluMul: [graphTimedUs(64, () => addon.siluMul(act, plainGu)), timedDelta(gu, (i) => addon.siluMul(act, yGu, ...delta(gu, i)))],
    };
    console.log(`${model} n=${String(n).padStart(2)}: ` +
      Object.entries(pairs).map(([k, [a, b]]) => `${k} ${a.toFixed(2)} / ${b.toFixed(2)}`).join(', '));
    if (down) {
      // [plain GEMM + plain op, extended GEMM + op with delta (bT copy i), the same with bT copy 0]
      const yDown = wide(down);
      const inContext = (p, input, plainOut, yOut, op) => {
        const gemm = (i, ext) => addon.linear(ext ? yOut : plainOut, input, (ext ? p.copies : p.plain)[i], null, false, 0);
        return [timed(p, (i) => { gemm(i, false); op(plainOut); }),
          timed(p, (i) => { gemm(i, true); op(yOut, ...delta(p, i % p.bTs.length)); }),
          timed(p, (i) => { gemm(i, true); op(yOut, ...delta(p, 0)); })];
      };
      const plainO = addon.empty('bf16', [n, hidden], 'cuda'), plainDown = addon.empty('bf16', [n, hidden], 'cuda');
      const inCtx = {
        'qkv+rope': inContext(qkv, x, plainQkv, yQkv, (y, ...d) => rope(y, ...d)),
        'o+addRmsNorm': inContext(o, attn, plainO, yO, (y, ...d) => addon.addRmsNorm(residual, y, norm, EPS, x, ...d)),
        'gate_up+siluMul': inContext(gu, x, plainGu, yGu, (y, ...d) => addon.siluMul(act, y, ...d)),
        'down+addRmsNorm': inContext(down, act, plainDown, yDown, (y, ...d) => addon.addRmsNorm(residual, y, norm, EPS, x, ...d)),
      };
      console.log(`${model} n=${String(n).padStart(2)} in context (plain / adapted / adapted, bT hot): ` +
        Object.entries(inCtx).map(([k, [a, b, c]]) => `${k} ${a.toFixed(2)} / ${b.toFixed(2)} / ${c.toFixed(2)}`).join(', '));
      for (const t of [yDown, plainO, plainDown]) t.dispose();
    }
    for (const t of [rowSlots, positions, slots, x, attn, residual, out, act, yQkv, yO, yGu, plainQkv, plainGu]) t.dispose();
  }
  for (const p of [qkv, o, gu, ...(down ? [down] : [])]) [...p.copies, ...p.plain, ...p.bTs, p.ranks].forEach((t) => t.dispose());
  for (const t of [norm, headNorm, invFreq, kCache, vCache]) t.dispose();
}
