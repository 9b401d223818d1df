// One decode step of C sequences, each one token past a context of L, as the engine's graphs
// run it: the model's forward on a workspace, captured STEPS times in one graph and replayed
// (GPU ms a step, medians of REPS), LoRA off (no pool), base rows with the pool on (as the
// engine runs a step where no row names an adapter), and every row on one adapter:
//
//   node bench/decode_step.mjs DIR     (DIR from `mstar synth --adapters 1` or more; its first adapter)
//
// SEQS=1,8,32 (C), LEN=192 (L), STEPS=8, REPS=7; WIDTH=N: block tables N tokens wide, -1 past
// each sequence's blocks (default: the model's max_position_embeddings, as wide as the
// engine's graphs take them at its default max_model_len; attention's splits follow from
// that width). DROP=1 also prints, for each mode at each C, what
// each op costs the step in context: the step's time less the time of the same step captured
// without that op's calls (ops before and after it then overlap as they would without it; the
// numbers are timings only: the dropped op's outputs are stale). The isolated times of
// prefill_step.mjs's OPS=1 overstate ops that overlap their neighbours (a projection's weights
// stream into L2 during the kernel before it).
// SLOTS, TARGETS: the pool's slot count (default 2) and targets (default the adapter's own;
// all: every target), bench/one_adapter.mjs. MODES=off,one: only those
// modes. VARIANTS="MSTAR_X=0;MSTAR_X=1,MSTAR_Y=2": each mode's step timed twice under each
// variant's environment, set before its capture and removed after (an A/B of switches the
// addon reads at each launch, in one process: calls to the GPU machine land on machines that
// differ by a few %); the mode's time is then its first variant's best.
// Needs dist/ and the addon (as bench/gpu_session.sh).
import { addon } from '../dist/lib/addon/index.js';
import { BLOCK, decodeSetup, decodeStep } from './decode_inputs.mjs';
import { graphTimedUs } from './graph_timing.mjs';

const dir = process.argv[2];
if (!dir) throw new Error('usage: node bench/decode_step.mjs DIR');
const SEQS = (process.env.SEQS ?? '1,8,32').split(',').map(Number);
const LEN = Number(process.env.LEN ?? 192), STEPS = Number(process.env.STEPS ?? 8), REPS = Number(process.env.REPS ?? 7);
const width = process.env.WIDTH === undefined ? undefined : Number(process.env.WIDTH);
const setup = await decodeSetup(dir, { len: LEN, maxSeqs: Math.max(...SEQS), width, modes: (process.env.MODES ?? 'off,base,one').split(',') });
const { model, pool, kv, tableWidth } = setup;

/** GPU ms a step: STEPS forwards of s captured in one graph, replayed REPS times (the first call eager, cuBLASLt's picks timed). */
const stepMs = (s, ws) => graphTimedUs(STEPS, () => model.forward(s, kv, ws).dispose(), REPS) / 1e3;

const OPS = ['embedding', 'rmsNorm', 'addRmsNorm', 'linear', 'linearWide', 'loraShrink', 'linearExpand', 'loraExpand',
  'ropeKvWrite', 'pagedAttention', 'pagedAttentionLinear', 'siluMul', 'linearSiluMul', 'rmsNormLinear', 'gatherRows'];
const VARIANTS = process.env.VARIANTS?.split(';').map((v) => v.split(',').filter(Boolean).map((e) => e.split('=')));

/** GPU ms of step s (under each of VARIANTS, printed; returned: the first variant's best). */
function timed(C, mode, s, ws) {
  if (!VARIANTS) return stepMs(s, ws);
  let first;
  for (const vars of VARIANTS) {
    for (const [k, v] of vars) process.env[k] = v;
    try {
      const ms = [stepMs(s, ws), stepMs(s, ws)];
      console.log(`  c=${C} ${mode} [${vars.map((kv) => kv.join('=')).join(',') || 'as is'}]: ${ms.map((x) => x.toFixed(3)).join(' ')} ms`);
      first ??= Math.min(...ms);
    } finally {
      for (const [k] of vars) delete process.env[k];
    }
  }
  return first;
}

console.log(`${dir}: ${model.config.numLayers} layers, hidden ${model.config.hiddenSize}; decode at context ${LEN}, tables ${tableWidth * BLOCK} wide; GPU ms a step, medians of ${REPS} replays of ${STEPS} steps`);
for (const C of SEQS) {
  const times = {};
  for (const [mode, rowSlot, ws] of setup.modes) {
    model.lora = mode === 'off' ? undefined : pool;
    const s = decodeStep(model, C, LEN, tableWidth, rowSlot);
    const full = timed(C, mode, s, ws);
    times[mode] = full;
    if (process.env.DROP === '1') {
      const costs = [];
      for (const op of OPS) {
        const original = addon[op];
        let calls = 0;
        addon[op] = () => { calls++; };
        try {
          const without = stepMs(s, ws);
          if (calls) costs.push(`${op} ${(full - without).toFixed(3)} (${calls / STEPS})`);
        } finally {
          addon[op] = original;
        }
      }
      console.log(`  c=${C} ${mode}: ${full.toFixed(3)} ms; without each op, ms saved (calls a step): ${costs.join(', ')}`);
    }
    s.dispose();
  }
  const ratios = times.off ? ['base', 'one'].filter((m) => times[m]).map((m) => `${m}/off ${(times.off / times[m] * 100).toFixed(1)}%`) : [];
  console.log(`c=${C}: ${Object.entries(times).map(([m, ms]) => `${m} ${ms.toFixed(3)}`).join(', ')} ms` +
    (ratios.length ? ` (${ratios.join(', ')})` : ''));
}
setup.dispose();
