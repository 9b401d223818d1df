// What merging an adapter into the weights costs (merge_after_steps): MergedWeights.merge of
// an adapter on every linear (already in a slot) and the unmerge after it, each until the GPU
// has done it, from an idle stream; medians over MERGES (after WARMUP), with the bytes each
// rewrites and the bandwidth that is:
//
//   node bench/merge.mjs DIR     (DIR from `mstar synth --adapters 1` or more)
//
// Needs dist/ and the addon (as bench/gpu_session.sh).
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';

import { addon } from '../dist/lib/addon/index.js';
import { readAdapter } from '../dist/lib/lora/adapter.js';
import { HostAdapter } from '../dist/lib/lora/host_adapter.js';
import { MergedWeights } from '../dist/lib/lora/merged_weights.js';
import { SlotWeights } from '../dist/lib/lora/slot_weights.js';
import { CPU, cudaPlacement, loadModel } from '../dist/lib/models/index.js';
import { median } from './median.mjs';

const dir = process.argv[2];
if (!dir) throw new Error('usage: node bench/merge.mjs DIR');
const MERGES = Number(process.env.MERGES ?? 10), WARMUP = 2, RANK = Number(process.env.RANK ?? 16);
const TARGETS = new Set(['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj']);
const placement = process.env.DEVICE === 'cpu' ? CPU : cudaPlacement();
const model = loadModel(dir, { placement });
const pool = new SlotWeights(model.config, 2, RANK, TARGETS, model.weights, placement);
const host = await HostAdapter.read(readAdapter('lora-000', join(dir, 'adapters', 'lora-000'), model.config, { maxRank: RANK, targets: TARGETS }), pool);
pool.load(1, host);
const merged = new MergedWeights(pool);

const timed = (f) => {
  addon.synchronize();
  const t0 = performance.now();
  f();
  addon.synchronize();
  return performance.now() - t0;
};
const merges = [], unmerges = [];
for (let i = 0; i < WARMUP + MERGES; i++) {
  const m = timed(() => merged.merge(1)), u = timed(() => merged.unmerge());
  if (i >= WARMUP) merges.push(m), unmerges.push(u);
}
// A merge reads W as loaded and writes W (b and a are small); an unmerge copies W back.
const gb = (2 * merged.bytes) / 1e9;
const line = (name, ms) => `${name} ${ms.toFixed(2)} ms (${(gb / (ms / 1e3)).toFixed(0)} GB/s)`;
console.log(`merge into the weights, ${model.config.numLayers} layers, rank ${RANK}, ${(merged.bytes / 2 ** 30).toFixed(2)} GiB of adapted W ` +
  `on ${placement.device}: ${line('merge', median(merges))}, ${line('unmerge', median(unmerges))} (medians of ${MERGES})`);
merged.dispose();
host.dispose();
pool.dispose();
