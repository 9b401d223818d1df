// Decode attention alone on the GPU machine: one query token a sequence, Qwen3-0.6B's heads
// (16 q / 8 kv) and Qwen3-8B's (32 / 8), head dim 128, bf16 cache in blocks of 16. Short
// contexts use a table as wide as a captured graph's (40960 keys), as a decode step does.
// Each shape is timed inside a captured graph over copies of the cache that together pass
// L2 (a step finds the layer's KV evicted by the weights); prints µs a call, the KV read's
// bandwidth, and a checksum of the output (to compare builds):
//
//   node bench/attention_decode.mjs
//
// Needs dist/ and the addon (as bench/gpu_session.sh). SHAPES=seqs x ctx,... and HEADS=q heads,...
// pick shapes.
import { addon } from '../dist/lib/addon/index.js';
import { graphTimedUs } from './graph_timing.mjs';

const BS = 16, HD = 128, KV = 8, GRAPH_KEYS = 40960, L2_PAST = 192 * 2 ** 20;
const SHAPES = (process.env.SHAPES ?? '1x170,8x170,32x170,64x170,1x4096,32x4096,128x1024,1x32768')
  .split(',').map((s) => s.split('x').map(Number));

// Values that vary along and across rows (a period of 4099, prime: no two rows alike).
const PERIOD = Float32Array.from({ length: 4099 }, (_, i) => Math.sin(i * 0.37) * 0.5);
function wave(n, phase) {
  const a = new Float32Array(n);
  for (let i = 0, j = (phase * 977) % PERIOD.length; i < n; j = 0) {
    const len = Math.min(PERIOD.length - j, n - i);
    a.set(PERIOD.subarray(j, j + len), i);
    i += len;
  }
  return a;
}

for (const heads of (process.env.HEADS ?? '16,32').split(',').map(Number)) {
  for (const [seqs, ctx] of SHAPES) {
    const per = Math.ceil(ctx / BS), width = ctx <= 1024 ? GRAPH_KEYS / BS : per;
    const cacheBytes = seqs * per * BS * KV * HD * 2 * 2;
    const copies = Math.min(16, Math.max(1, Math.ceil(L2_PAST / cacheBytes)));
    const caches = Array.from({ length: copies }, (_, c) => ['k', 'v'].map((_, i) =>
      addon.fromArray('bf16', [seqs * per, BS, KV, HD], wave(seqs * per * BS * KV * HD, c * 2 + i), 'cuda')));
    const table = new Int32Array(seqs * width).fill(0);
    for (let s = 0; s < seqs; ++s) for (let b = 0; b < per; ++b) table[s * width + b] = s * per + b;
    const tables = addon.fromArray('i32', [seqs, width], table, 'cuda');
    const starts = addon.fromArray('i32', [seqs + 1], Int32Array.from({ length: seqs + 1 }, (_, i) => i), 'cuda');
    const lens = addon.fromArray('i32', [seqs], new Int32Array(seqs).fill(ctx), 'cuda');
    const qkv = addon.fromArray('bf16', [seqs, (heads + 2 * KV) * HD], wave(seqs * (heads + 2 * KV) * HD, 9), 'cuda');
    const out = addon.empty('bf16', [seqs, heads * HD], 'cuda');
    const run = (i) => addon.pagedAttention(out, qkv, caches[i % copies][0], caches[i % copies][1], tables, starts, lens, heads, KV, HD, 0.088);
    const us = graphTimedUs(Math.max(copies, 16), run);
    run(0);
    const sum = out.toArray().reduce((a, b) => a + Math.abs(b), 0);
    const kvBytes = seqs * ctx * KV * HD * 2 * 2;
    console.log(`${heads}/${KV} heads, ${String(seqs).padStart(3)} x ${String(ctx).padStart(5)}: ${us.toFixed(2).padStart(7)} µs, `
      + `${(kvBytes / us / 1e6).toFixed(2)} TB/s of KV, |out| ${sum.toFixed(3)}`);
    for (const t of [...caches.flat(), tables, starts, lens, qkv, out]) t.dispose();
  }
}
