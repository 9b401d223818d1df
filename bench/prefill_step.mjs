// One eager prefill step of P prompts of L tokens, as the engine runs a step that admits new
// requests: the model's forward on an eager workspace, LoRA off (no pool), the pool on with no
// row on an adapter (`pool`: the engine then runs the step without a LoRA plan), base rows in a
// plan (as in a step whose other rows run adapters), and every row on one adapter. For each it prints the step's GPU time (the forward
// replayed as a graph: no launch gaps), and the eager step's host time (until forward returns)
// and time until done (forward and a synchronize), both for a shape seen before and for a
// fresh one (each call a few rows longer than the last: every cuBLASLt shape new, as the
// varying batches of serving make them):
//
//   node bench/prefill_step.mjs DIR     (DIR from `mstar synth --adapters 1` or more; its first adapter,
//                                        or ADAPTERS' first;
//                                        DEVICE=cpu: the reference, no graph)
//
// PROMPTS=1,2,8,32 (P), LEN=128 (L), REPS=9. OPS=1 also prints, for each mode at the largest P, each
// op's total GPU time over one step (each call timed alone, replayed in a graph).
// MSTAR_LORA_GEMM_ROWS moves the adapters' path as in the engine (inf: the decode-size path).
// SLOTS, TARGETS: the pool's slot count (default 2) and targets (default the adapter's own;
// all: every target), bench/one_adapter.mjs.
// Needs dist/ and the addon (as bench/gpu_session.sh).
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';

import { addon } from '../dist/lib/addon/index.js';
import { loraGemmRowsSetting } from '../dist/lib/engine/options.js';
import { CPU, cudaPlacement, KvCache, loadModel, stepTensors } from '../dist/lib/models/index.js';
import { Workspace } from '../dist/lib/models/workspace.js';
import { median } from './median.mjs';
import { poolWithOneAdapter } from './one_adapter.mjs';

const dir = process.argv[2];
if (!dir) throw new Error('usage: node bench/prefill_step.mjs DIR');
const PROMPTS = (process.env.PROMPTS ?? '1,2,8,32').split(',').map(Number);
const LEN = Number(process.env.LEN ?? 128), REPS = Number(process.env.REPS ?? 9), BS = 16;
const maxTokens = Math.max(...PROMPTS) * (LEN + REPS + 4);

const cuda = process.env.DEVICE !== 'cpu';
const model = loadModel(dir, { placement: cuda ? cudaPlacement() : CPU });
model.loraGemmRows = loraGemmRowsSetting(model.config.hiddenSize);  // as the engine sets it (MSTAR_LORA_GEMM_ROWS)
const { lora, pool, slot } = await poolWithOneAdapter(model, process.env.ADAPTERS ?? join(dir, 'adapters'));
const blocksPer = Math.ceil((LEN + REPS + 4) / BS);
const kv = new KvCache(model.config, Math.max(...PROMPTS) * blocksPer, BS, model.placement);
const wsOff = new Workspace(model.config, model.placement, maxTokens, Math.max(...PROMPTS));
const wsOn = new Workspace(model.config, model.placement, maxTokens, Math.max(...PROMPTS), pool.widths);

/** The step tensors of P prompts of len tokens, rows on `rowSlot` (undefined: no LoRA plan). */
function step(P, len, rowSlot) {
  const n = P * len, vocab = model.config.vocabSize;
  const tokens = Int32Array.from({ length: n }, (_, i) => 3 + ((i * 7919) % (vocab - 3)));
  const rowSlots = new Int32Array(n).fill(rowSlot ?? 0);
  return stepTensors({
    tokens,
    positions: Int32Array.from({ length: n }, (_, i) => i % len),
    slots: Int32Array.from({ length: n }, (_, i) => Math.floor(i / len) * blocksPer * BS + (i % len)),
    queryStarts: Int32Array.from({ length: P + 1 }, (_, s) => s * len),
    contextLens: new Int32Array(P).fill(len),
    blockTables: Int32Array.from({ length: P * blocksPer }, (_, i) => i),
    maxBlocks: blocksPer,
    logitRows: Int32Array.from({ length: P }, (_, s) => (s + 1) * len - 1),
    lora: rowSlot === undefined ? undefined : { rowSlots, logitSlots: new Int32Array(P).fill(rowSlot), embedRows: Int32Array.from(tokens, (t) => rowSlot * vocab + t) },
  }, model.placement.device);
}

const MODES = [['off', undefined, wsOff], ['pool', undefined, wsOn], ['base', 0, wsOn], ['one', slot, wsOn]];
const fmt = (ms) => ms.toFixed(2).padStart(7);

/** Host ms until forward returns, and ms until the GPU is done. */
function eager(P, len, rowSlot, ws) {
  const s = step(P, len, rowSlot);
  addon.synchronize();
  const t0 = performance.now();
  const logits = model.forward(s, kv, ws);
  const t1 = performance.now();
  addon.synchronize();
  const t2 = performance.now();
  logits.dispose();
  s.dispose();
  return [t1 - t0, t2 - t0];
}

function gpuMs(P, rowSlot, ws) {
  if (!cuda) return NaN;
  const s = step(P, LEN, rowSlot);
  model.forward(s, kv, ws).dispose();
  addon.synchronize();
  const graph = addon.captureGraph(() => model.forward(s, kv, ws).dispose());
  const t = [];
  for (let r = 0; r < REPS; r++) {
    addon.synchronize();
    const t0 = performance.now();
    graph.replay();
    addon.synchronize();
    t.push(performance.now() - t0);
  }
  graph.dispose();
  s.dispose();
  return median(t);
}

console.log(`${dir}: ${model.config.numLayers} layers, hidden ${model.config.hiddenSize}; prompts of ${LEN} tokens; ms, medians of ${REPS}`);
console.log('prompts  rows  mode   gpu (graph)  eager host  eager done  fresh host  fresh done');
let fresh = 1;
for (const P of PROMPTS) {
  for (const [mode, rowSlot, ws] of MODES) {
    model.lora = mode === 'off' ? undefined : pool;
    const g = gpuMs(P, rowSlot, ws);
    const same = Array.from({ length: REPS }, () => eager(P, LEN, rowSlot, ws));
    const news = Array.from({ length: REPS }, () => eager(P, LEN + (fresh = (fresh % (REPS + 3)) + 1), rowSlot, ws));
    const col = (xs, i) => fmt(median(xs.map((x) => x[i])));
    console.log(`${String(P).padStart(7)} ${String(P * LEN).padStart(5)}  ${mode.padEnd(5)} ${fmt(g)}     ${col(same, 0)}     ${col(same, 1)}     ${col(news, 0)}     ${col(news, 1)}`);
  }
}

if (process.env.OPS === '1' && cuda) {
  // Each addon op of one step alone on the GPU: run as the step runs it, then the same call
  // captured 5 times in a graph and replayed (accumulating ops add again: the times hold).
  const P = Math.max(...PROMPTS);
  const names = ['embedding', 'rmsNorm', 'addRmsNorm', 'linear', 'linearWide', 'loraJoin', 'loraShrink', 'linearExpand', 'loraExpand',
    'ropeKvWrite', 'pagedAttention', 'pagedAttentionLinear', 'siluMul', 'linearSiluMul', 'rmsNormLinear', 'gatherRows'];
  const originals = Object.fromEntries(names.map((k) => [k, addon[k]]));
  for (const [mode, rowSlot, ws] of MODES) {
    model.lora = mode === 'off' ? undefined : pool;
    eager(P, LEN, rowSlot, ws);  // shapes made
    const totals = new Map();
    for (const k of names) {
      addon[k] = (...args) => {
        originals[k](...args);
        const graph = addon.captureGraph(() => { for (let i = 0; i < 5; i++) originals[k](...args); });
        graph.replay();
        addon.synchronize();
        const t0 = performance.now();
        graph.replay();
        addon.synchronize();
        totals.set(k, (totals.get(k) ?? 0) + (performance.now() - t0) / 5);
        graph.dispose();
      };
    }
    const s = step(P, LEN, rowSlot);
    try {
      model.forward(s, kv, ws).dispose();
    } finally {
      Object.assign(addon, originals);
      s.dispose();
    }
    const sum = [...totals.values()].reduce((a, b) => a + b, 0);
    console.log(`ops, ${mode}, ${P * LEN} rows (GPU ms over the step; sum ${sum.toFixed(2)}): ` +
      [...totals].sort((a, b) => b[1] - a[1]).map(([k, v]) => `${k} ${v.toFixed(2)}`).join(', '));
  }
}
model.lora = pool;
[wsOff, wsOn, kv].forEach((t) => t.dispose());
lora.dispose();
