// Rough timings of the hot CUDA ops against their rooflines (MSTAR_GPU_TIMING=1 only).
// Host-timed: warm up, then the median of several batches of back-to-back launches
// ended by synchronize(), so launch overhead counts (it does in an eager step too).
import { it } from 'vitest';

import { addon, HAS_CUDA, onCuda, Rng, type Tensor } from './helpers.js';

const HBM = 4.8e12;  // H200 datasheet bytes/s (measured copies reach about 4.3e12)

function time(fn: () => void, reps = 20): number {
  for (let i = 0; i < 3; ++i) fn();
  addon.synchronize();
  const samples: number[] = [];
  for (let s = 0; s < 7; ++s) {
    const t0 = performance.now();
    for (let i = 0; i < reps; ++i) fn();
    addon.synchronize();
    samples.push((performance.now() - t0) / reps);
  }
  samples.sort((a, b) => a - b);
  return samples[3] / 1e3;  // seconds
}

/**
 * Seconds per call of fn inside a captured graph (as a decode step runs it): no launch
 * overhead. fn gets the call's index, to cycle through copies of its weights that
 * together pass the L2 cache (a decode step reads its weights from HBM).
 */
function timeInGraph(fn: (rep: number) => void, reps = 48): number {
  const graph = addon.captureGraph(() => {
    for (let i = 0; i < reps; ++i) fn(i);
  });
  const s = time(() => graph.replay(), 1) / reps;
  graph.dispose();
  return s;
}

function randn(dtype: 'f32' | 'bf16', shape: number[], seed: number, scale = 1): Tensor {
  const n = shape.reduce((a, b) => a * b, 1);
  return onCuda(dtype, shape, new Rng(seed).floats(n, -scale, scale));
}

it.runIf(HAS_CUDA && process.env.MSTAR_GPU_TIMING === '1')('timings', () => {
  const lines: string[] = [];
  const report = (what: string, s: number, extra: string) => lines.push(`${what.padEnd(58)} ${(s * 1e6).toFixed(1).padStart(9)} us  ${extra}`);

  // Decode GEMV: bound by reading the weights once.
  const w = randn('bf16', [12288, 4096], 1, 0.02);
  const bytes = 12288 * 4096 * 2;
  // n = 17 takes cuBLASLt: compare it with the GEMV's n = 2..4 (and 8, 16 there too).
  for (const n of [1, 2, 4, 8, 16, 17]) {
    for (const act of ['bf16', 'f32'] as const) {
      const x = randn(act, [n, 4096], 2);
      const out = addon.empty(act, [n, 12288], 'cuda');
      const s = time(() => addon.linear(out, x, w, null));
      report(`linear n=${n} 4096->12288 bf16 w, ${act} x`, s, `${((bytes / s) / 1e12).toFixed(2)} TB/s (${((bytes / HBM / s) * 100).toFixed(0)}% of HBM)`);
    }
  }
  // Qwen3-0.6B's decode projections at n = 1: too small for one warp a row to fill the GPU.
  for (const [inF, outF] of [[1024, 4096], [2048, 1024], [1024, 6144], [3072, 1024]]) {
    const wq = randn('bf16', [outF, inF], 8, 0.02);
    const x = randn('bf16', [1, inF], 9);
    const out = addon.empty('bf16', [1, outF], 'cuda');
    const s = time(() => addon.linear(out, x, wq, null));
    const b = outF * inF * 2;
    report(`linear n=1 ${inF}->${outF} bf16`, s, `${((b / s) / 1e12).toFixed(2)} TB/s (${((b / HBM / s) * 100).toFixed(0)}% of HBM)`);
  }
  // Prefill GEMM: cuBLASLt for bf16, the tiled kernel for f32.
  for (const [n, act] of [[512, 'bf16'], [2048, 'bf16'], [512, 'f32']] as const) {
    const x = randn(act, [n, 4096], 3);
    const out = addon.empty(act, [n, 12288], 'cuda');
    const s = time(() => addon.linear(out, x, w, null), 5);
    report(`linear n=${n} 4096->12288 ${act}`, s, `${((2 * n * 4096 * 12288) / s / 1e12).toFixed(1)} TFLOP/s`);
  }

  // Decode attention: 32 sequences x 4096 context, 32 q heads / 8 kv heads, headDim 128.
  // [seqs, context, table width in blocks]: a captured graph's table is as wide as the
  // longest context allowed (40960 tokens for Qwen3), whatever the contexts are.
  for (const [seqs, ctx, width] of [[32, 4096, 256], [1, 32768, 2048], [128, 1024, 64], [1, 170, 2560], [8, 170, 2560]]) {
    const l = { h: 32, kv: 8, hd: 128 }, bs = 16;
    const blocksPerSeq = width;
    const numBlocks = seqs * blocksPerSeq;
    const k = addon.zeros('bf16', [numBlocks, bs, l.kv, l.hd], 'cuda');
    const v = addon.zeros('bf16', [numBlocks, bs, l.kv, l.hd], 'cuda');
    addon.fill(k, 0.01);
    addon.fill(v, 0.02);
    const tables = onCuda('i32', [seqs, blocksPerSeq], new Rng(4).shuffle(Array.from({ length: numBlocks }, (_, i) => i)));
    const starts = onCuda('i32', [seqs + 1], Array.from({ length: seqs + 1 }, (_, i) => i));
    const lens = onCuda('i32', [seqs], new Array(seqs).fill(ctx));
    const qkv = randn('bf16', [seqs, (l.h + 2 * l.kv) * l.hd], 5);
    const out = addon.empty('bf16', [seqs, l.h * l.hd], 'cuda');
    const s = time(() => addon.pagedAttention(out, qkv, k, v, tables, starts, lens, l.h, l.kv, l.hd, 0.088));
    const kvBytes = seqs * ctx * l.kv * l.hd * 2 * 2;
    report(`attention decode ${seqs} seqs x ${ctx} ctx (table ${width * 16}), 32/8 heads, hd 128`, s, `${(kvBytes / s / 1e12).toFixed(2)} TB/s of KV`);
  }
  // Decode steps of Qwen3-0.6B (16/8 heads) at short contexts, as a captured graph runs them
  // (the host-timed rows above count a launch each): the table as wide as a graph's.
  for (const seqs of [1, 8, 32, 64]) {
    const ctx = 170, bs = 16, width = 2560, per = Math.ceil(ctx / bs);
    const table = new Array(seqs * width).fill(0);
    for (let s = 0; s < seqs; ++s) for (let b = 0; b < per; ++b) table[s * width + b] = s * per + b;
    const k = addon.zeros('bf16', [seqs * per, bs, 8, 128], 'cuda'), v = addon.zeros('bf16', [seqs * per, bs, 8, 128], 'cuda');
    const qkv = randn('bf16', [seqs, 32 * 128], 26), out = addon.empty('bf16', [seqs, 16 * 128], 'cuda');
    const tables = onCuda('i32', [seqs, width], table), starts = onCuda('i32', [seqs + 1], Array.from({ length: seqs + 1 }, (_, i) => i));
    const lens = onCuda('i32', [seqs], new Array(seqs).fill(ctx));
    const s = timeInGraph(() => addon.pagedAttention(out, qkv, k, v, tables, starts, lens, 16, 8, 128, 0.088));
    const kvBytes = seqs * ctx * 8 * 128 * 2 * 2;
    report(`attention decode in a graph, ${seqs} seqs x ${ctx} ctx, 16/8 heads, hd 128`, s, `${(kvBytes / s / 1e12).toFixed(2)} TB/s of KV`);
  }
  {
    const l = { h: 32, kv: 8, hd: 128 }, bs = 16, T = 2048;
    const k = addon.zeros('bf16', [T / bs, bs, l.kv, l.hd], 'cuda');
    const v = addon.zeros('bf16', [T / bs, bs, l.kv, l.hd], 'cuda');
    const qkv = randn('bf16', [T, (l.h + 2 * l.kv) * l.hd], 6);
    const out = addon.empty('bf16', [T, l.h * l.hd], 'cuda');
    const tables = onCuda('i32', [1, T / bs], Array.from({ length: T / bs }, (_, i) => i));
    const starts = onCuda('i32', [2], [0, T]);
    const lens = onCuda('i32', [1], [T]);
    const s = time(() => addon.pagedAttention(out, qkv, k, v, tables, starts, lens, l.h, l.kv, l.hd, 0.088), 3);
    report(`attention prefill 1 x ${T} tokens, 32/8 heads, hd 128`, s, `${((2 * 2 * T * T * l.h * l.hd) / 2 / s / 1e12).toFixed(1)} TFLOP/s (causal)`);
  }

  // The adapter's ops at decode batch sizes, on Qwen3-0.6B's shapes (hidden 1024, q 2048,
  // qkv 4096, intermediate 3072), rank 16, every row on slot 1: each beside the plain op it
  // joins or follows, timed inside a graph as a decode step runs them.
  for (const n of [1, 8, 32, 64]) {
    const rank = 16, slots = 3;
    const slotOfRow = onCuda('i32', [n], new Array(n).fill(1));
    // 8 copies of each weight (more than the 50 MB L2 holds together), call i using copy i % 8.
    const copies = <T,>(make: (seed: number) => T) => Array.from({ length: 8 }, (_, i) => make(100 + i));
    const a = (rows: number, inF: number) => copies((seed) => randn('bf16', [slots, rows, inF], seed, 0.05));
    const b = (outF: number, slices: number) => copies((seed) => randn('bf16', [outF, slots, slices * rank], seed, 0.05));
    const w = (outF: number, inF: number) => copies((seed) => randn('bf16', [outF, inF], seed, 0.02));
    const starts = (widths: number[]) => Int32Array.from(widths.reduce((acc, w) => [...acc, acc[acc.length - 1] + w], [0]));
    const x = randn('bf16', [n, 1024], 13);
    const attn = randn('bf16', [n, 2048], 16), residual = randn('bf16', [n, 1024], 17);
    const qkv = addon.empty('bf16', [n, 4096], 'cuda'), gu = addon.empty('bf16', [n, 6144], 'cuda');
    const t48 = randn('bf16', [n, 48], 18), t32 = randn('bf16', [n, 32], 19), t16 = randn('bf16', [n, 16], 20);
    const wQkv = w(4096, 1024), wGu = w(6144, 1024), wO = w(1024, 2048);
    const aO = a(16, 2048);
    const bQkv = b(4096, 3), bGu = b(6144, 2), bO = b(1024, 1), stQkv = starts([2048, 1024, 1024]), stGu = starts([3072, 3072]), stO = starts([1024]);
    const us = (fn: (c: number) => void) => timeInGraph((i) => fn(i % 8));
    const row = (what: string, plain: number, lora: number) =>
      report(`lora n=${n} ${what}`, lora, `plain ${(plain * 1e6).toFixed(1)} us, +${((lora - plain) * 1e6).toFixed(1)} us`);
    row('loraShrink 2048 -> 16 (o)', 0, us((c) => addon.loraShrink(t16, attn, aO[c], slotOfRow)));
    row('linearExpand 1024 -> 4096 (qkv)', us((c) => addon.linear(qkv, x, wQkv[c], null)), us((c) => addon.linearExpand(qkv, x, wQkv[c], null, t48, bQkv[c], slotOfRow, stQkv)));
    row('linearExpand 1024 -> 6144 (gate_up)', us((c) => addon.linear(gu, x, wGu[c], null)), us((c) => addon.linearExpand(gu, x, wGu[c], null, t32, bGu[c], slotOfRow, stGu)));
    row('linearExpand 2048 -> 1024 accumulate (o)', us((c) => addon.linear(residual, attn, wO[c], null, true)),
      us((c) => addon.linearExpand(residual, attn, wO[c], null, t16, bO[c], slotOfRow, stO, true)));
  }

  // Sampling 64 rows of a 151936 vocabulary.
  const n = 64, vocab = 151936;
  const logits = randn('f32', [n, vocab], 7, 8);
  const ids = addon.empty('i32', [n], 'cuda');
  for (const [name, t, k, p] of [['greedy', 0, 0, 1], ['temperature 1', 1, 0, 1], ['top-k 50', 1, 50, 1], ['top-p 0.9', 1, 0, 0.9], ['top-k 50 + top-p 0.9', 0.8, 50, 0.9]] as const) {
    const args = [onCuda('f32', [n], new Array(n).fill(t)), onCuda('i32', [n], new Array(n).fill(k)), onCuda('f32', [n], new Array(n).fill(p)),
      onCuda('i64', [n], Array.from({ length: n }, (_, i) => i)), onCuda('i32', [n], new Array(n).fill(3))] as const;
    const s = time(() => addon.sample(ids, logits, ...args), 5);
    report(`sample ${n} x ${vocab}, ${name}`, s, '');
  }
  // A language model's peaked logits (Zipf-like weights): top-p's nucleus is a few dozen tokens.
  {
    const rank = new Rng(8).shuffle(Array.from({ length: vocab }, (_, i) => i + 1));
    const peaked = new Float32Array(n * vocab);
    for (let r = 0; r < n; ++r) for (let i = 0; i < vocab; ++i) peaked[r * vocab + i] = 12 - 1.5 * Math.log(rank[(i + r * 977) % vocab]);
    const x = onCuda('f32', [n, vocab], peaked);
    const args = [onCuda('f32', [n], new Array(n).fill(1)), onCuda('i32', [n], new Array(n).fill(0)), onCuda('f32', [n], new Array(n).fill(0.9)),
      onCuda('i64', [n], Array.from({ length: n }, (_, i) => i)), onCuda('i32', [n], new Array(n).fill(3))] as const;
    report(`sample ${n} x ${vocab}, top-p 0.9, peaked logits`, time(() => addon.sample(ids, x, ...args), 5), '');
  }
  console.log(`\n${lines.join('\n')}\n`);
});
