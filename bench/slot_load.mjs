// A slot load alone: the pool's SlotWeights.load of an adapter already in the host cache,
// as the engine thread runs it when a slot changes hands (churn). Prints, over LOADS loads
// alternating between two adapters into one slot (after WARMUP), the median host time of
// the call (what the engine thread is held for), the median time until the GPU has it (the
// call and a synchronize, from an idle stream), and that time when the image was staged
// ahead (SlotWeights.stage, as the engine does before a time slice's hand-over):
//
//   node bench/slot_load.mjs DIR     (DIR from `mstar synth --adapters 2` or more; DEVICE=cpu: the reference)
//
// Needs dist/ and the addon (as bench/gpu_session.sh).
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';

import { addon } from '../dist/lib/addon/index.js';
import { readAdapter } from '../dist/lib/lora/adapter.js';
import { HostAdapter } from '../dist/lib/lora/host_adapter.js';
import { SlotWeights } from '../dist/lib/lora/slot_weights.js';
import { CPU, cudaPlacement, loadModel } from '../dist/lib/models/index.js';
import { median } from './median.mjs';

const dir = process.argv[2];
if (!dir) throw new Error('usage: node bench/slot_load.mjs DIR');
const LOADS = Number(process.env.LOADS ?? 40), WARMUP = 4, RANK = Number(process.env.RANK ?? 16);
const TARGETS = new Set(['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj']);
const placement = process.env.DEVICE === 'cpu' ? CPU : cudaPlacement();
const model = loadModel(dir, { placement });
const pool = new SlotWeights(model.config, 3, RANK, TARGETS, model.weights, placement);
const limits = { maxRank: RANK, targets: TARGETS };
const hosts = await Promise.all(['lora-000', 'lora-001'].map((name) => HostAdapter.read(readAdapter(name, join(dir, 'adapters', name), model.config, limits), pool)));

const host = [], done = [];
for (let i = 0; i < WARMUP + LOADS; i++) {
  addon.synchronize();
  const t0 = performance.now();
  pool.load(1, hosts[i % 2]);
  const t1 = performance.now();
  addon.synchronize();
  const t2 = performance.now();
  if (i >= WARMUP) host.push(t1 - t0), done.push(t2 - t0);
}
// The same loads with the image staged ahead (as the engine does for the next time slice):
// what is left is the scatter.
const staged = [];
for (let i = 0; i < WARMUP + LOADS; i++) {
  pool.stage(hosts[i % 2]);
  addon.awaitUploads();  // the copy runs on a side stream, which synchronize() alone does not wait for
  addon.synchronize();
  const t0 = performance.now();
  pool.load(1, hosts[i % 2]);
  addon.synchronize();
  if (i >= WARMUP) staged.push(performance.now() - t0);
}
const mb = pool.bytes / 2 ** 20;
console.log(`slot load, ${model.config.numLayers} layers, rank ${RANK}, pool ${mb.toFixed(1)} MiB on ${placement.device}: ` +
  `host ${(median(host) * 1000).toFixed(0)} µs, done ${median(done).toFixed(2)} ms, staged ahead ${median(staged).toFixed(2)} ms (medians of ${LOADS})`);
hosts.forEach((h) => h.dispose());
pool.dispose();
