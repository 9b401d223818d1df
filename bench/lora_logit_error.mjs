// How far CUDA bf16 logits are from the CPU engine's f32 on the demo model with its two adapters:
// batches of NP random prompts (default 8: at most 64 rows, the decode-size path; 24: the
// per-row path's many-row kernels), the prompts cycling base, shout and gpl; per kind of row,
// the mean and largest relative error of the last-token logits and how often the argmax differs.
//
//   node bench/lora_logit_error.mjs        (NP=8, NB=40 batches; needs dist/ and the addon)
import { demoModel } from '../dist/lib/config/demo.js';
import { ALL_TARGETS } from '../dist/lib/lora/adapter.js';
import { LoraManager } from '../dist/lib/lora/manager.js';
import { CPU, cudaPlacement, KvCache, loadModel, stepTensors } from '../dist/lib/models/index.js';
const BS = 16, BLOCKS = 4;
function logits(model, prompts, slots) {
  const vocab = model.config.vocabSize;
  const kv = new KvCache(model.config, prompts.length * BLOCKS, BS, model.placement);
  const starts = [0]; prompts.forEach((p) => starts.push(starts.at(-1) + p.length));
  const tokens = prompts.flat();
  const rowSlots = Int32Array.from(prompts.flatMap((p, i) => p.map(() => slots[i])));
  const t = stepTensors({ tokens: Int32Array.from(tokens), positions: Int32Array.from(prompts.flatMap((p) => p.map((_, j) => j))),
    slots: Int32Array.from(prompts.flatMap((p, i) => p.map((_, j) => i * BLOCKS * BS + j))),
    queryStarts: Int32Array.from(starts), contextLens: Int32Array.from(prompts.map((p) => p.length)),
    blockTables: Int32Array.from(prompts.flatMap((_, i) => Array.from({ length: BLOCKS }, (_, b) => i * BLOCKS + b))), maxBlocks: BLOCKS,
    logitRows: Int32Array.from(starts.slice(1).map((s) => s - 1)),
    lora: { rowSlots, logitSlots: Int32Array.from(slots), embedRows: Int32Array.from(tokens, (tok, r) => rowSlots[r] * vocab + tok) } }, model.placement.device);
  const out = model.forward(t, kv); const all = out.to('cpu'); const v = all.toArray();
  [t, out, all, kv].forEach((x) => x.dispose());
  return prompts.map((_, i) => v.slice(i * vocab, (i + 1) * vocab));
}
async function withAdapters(model) {
  const demo = demoModel();
  const lora = new LoraManager(model, { slots: 2, maxRank: 16, hostCache: 2, targets: ALL_TARGETS });
  for (const a of demo.adapters) await lora.register(a.name, a.path);
  const slots = demo.adapters.map((a) => lora.acquire(lora.keyOf(a.name)));
  model.lora = lora.weights;
  return slots;
}
const demo = demoModel();
const cuda = loadModel(demo.model, { placement: cudaPlacement('bf16') }), cpu = loadModel(demo.model, { dtype: 'f32' });
const [s1, s2] = await withAdapters(cuda); await withAdapters(cpu);
let seed = 7; const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed);
const err = { 0: [], 1: [], 2: [] }; let flips = { 0: 0, 1: 0, 2: 0 };
for (let b = 0; b < Number(process.env.NB ?? 40); b++) {
  const prompts = Array.from({ length: Number(process.env.NP ?? 8) }, () => Array.from({ length: 4 + (rnd() % 5) }, () => 3 + (rnd() % 4000)));
  const slots = prompts.map((_, i) => [0, s1, s2][(i + b) % 3]);
  const got = logits(cuda, prompts, slots), want = logits(cpu, prompts, slots);
  got.forEach((g, i) => {
    let num = 0, den = 0; for (let j = 0; j < g.length; j++) { num += (g[j] - want[i][j]) ** 2; den += want[i][j] ** 2; }
    const k = [0, s1, s2].indexOf(slots[i]); err[k].push(Math.sqrt(num / den));
    const am = (a) => a.reduce((m, v, j) => (v > a[m] ? j : m), 0); if (am(g) !== am(want[i])) flips[k]++;
  });
}
const mean = (a) => a.reduce((x, y) => x + y, 0) / a.length;
for (const k of [0, 1, 2]) console.log(`${['base', 'shout', 'gpl'][k]} rows: mean rel err ${mean(err[k]).toExponential(3)}, max ${Math.max(...err[k]).toExponential(3)}, argmax flips ${flips[k]}/${err[k].length}`);
