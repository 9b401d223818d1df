// Prefill attention alone on the GPU machine: one sequence of T tokens through
// addon.pagedAttention (the tensor-core prefill kernel), timed with synchronize(), so that
// Nsight Compute can take exactly that kernel:
//
//   node bench/attention_prefill.mjs                    # T=4096, H=32 (Qwen3-8B's 32/8 heads)
//   T=4096 H=16 node bench/attention_prefill.mjs        # Qwen3-0.6B's 16/8 heads
//   HD=64 node bench/attention_prefill.mjs              # head dim 64 (Llama-3.2-1B's)
//   REPS=1 ncu --kernel-name regex:prefill --launch-skip 2 --launch-count 1 \
//     --section SpeedOfLight --section InstructionStats node bench/attention_prefill.mjs
//   MSTAR_WGMMA=0 node bench/attention_prefill.mjs     # on a Hopper GPU: mma.sync, not wgmma
//
// Needs dist/ and the addon (as bench/gpu_session.sh). Prints the time, TFLOP/s (causal)
// and a checksum of the output (a change that should not move the numbers keeps it).
import { addon } from '../dist/lib/addon/index.js';

const T = Number(process.env.T ?? 4096), H = Number(process.env.H ?? 32), KV = 8, BS = 16;
const HD = Number(process.env.HD ?? 128);  // 64: Llama-3.2-1B's heads
const reps = Number(process.env.REPS ?? 10);
const wave = (n, phase) => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 12.9898 + phase) * 0.5);
const k = addon.fromArray('bf16', [T / BS, BS, KV, HD], wave(T * KV * HD, 0), 'cuda');
const v = addon.fromArray('bf16', [T / BS, BS, KV, HD], wave(T * KV * HD, 1), 'cuda');
const qkv = addon.fromArray('bf16', [T, (H + 2 * KV) * HD], wave(T * (H + 2 * KV) * HD, 2), 'cuda');
const out = addon.empty('bf16', [T, H * HD], 'cuda');
const i32 = (shape, values) => addon.fromArray('i32', shape, Int32Array.from(values), 'cuda');
const tables = i32([1, T / BS], Array.from({ length: T / BS }, (_, i) => i));
const starts = i32([2], [0, T]);
const lens = i32([1], [T]);
const run = () => addon.pagedAttention(out, qkv, k, v, tables, starts, lens, H, KV, HD, 0.088);

for (let i = 0; i < 2; i++) run();
addon.synchronize();
const t0 = performance.now();
for (let i = 0; i < reps; i++) run();
addon.synchronize();
const s = (performance.now() - t0) / reps / 1e3;
const flops = (2 * 2 * T * T * H * HD) / 2;  // QKᵀ and PV, causal half
const o = out.toArray();
let sum = 0;
for (let i = 0; i < o.length; i += 97) sum += o[i];
console.log(`prefill attention, ${T} tokens, ${H}/${KV} heads, hd ${HD}: ${(s * 1e6).toFixed(1)} us, ` +
  `${(flops / s / 1e12).toFixed(1)} TFLOP/s; checksum ${sum.toFixed(6)}`);
