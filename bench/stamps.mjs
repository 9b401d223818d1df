// Each kernel's time on a decode step's critical path, in context: a profiling build's kernel
// stamps (MSTAR_CUDA_STAMPS=ON node native/build_addon.mjs; cuda/stamps.cuh) over one replay
// of a captured step, as the engine's graphs run it. A kernel's time is from the end of its
// own wait (the kernel before it done) to the end of the next kernel's: its work after the
// wait plus the hand-over. Prints, for each C and mode, one layer's kernels in order (source
// file[blocks] µs; medians over REPS replays), each source file's µs over the whole step, and
// the step's parts (before the first attention, the layers, after the last) with the layers' spread:
//
//   node bench/stamps.mjs DIR     (DIR from `mstar synth --adapters 1` or more)
//
// SEQS=1,8 (C), LEN=192 (context), MODES=off,one (bench/decode_step.mjs's modes), LAYER
// (default the middle one), REPS=5; SLOTS, TARGETS as bench/one_adapter.mjs. A GEMM by
// cuBLASLt stamps nothing (its kernels do not wait): its time falls to the kernel before it.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { addon } from '../dist/lib/addon/index.js';
import { decodeSetup, decodeStep } from './decode_inputs.mjs';
import { warmCapture } from './graph_timing.mjs';
import { median } from './median.mjs';

const dir = process.argv[2];
if (!dir) throw new Error('usage: node bench/stamps.mjs DIR');
const SEQS = (process.env.SEQS ?? '1,8').split(',').map(Number);
const LEN = Number(process.env.LEN ?? 192), REPS = Number(process.env.REPS ?? 5);
const setup = await decodeSetup(dir, { len: LEN, maxSeqs: Math.max(...SEQS), modes: (process.env.MODES ?? 'off,one').split(',') });
const { model, pool, kv, tableWidth } = setup;
const LAYER = Number(process.env.LAYER ?? Math.floor(model.config.numLayers / 2));
const file = join(mkdtempSync(join(tmpdir(), 'mstar-stamps-')), 'stamps.txt');

/** One replay's stamps in time order: { ns, blocks, kind } (kind: the kernel's source file). */
function stampsOf(graph) {
  rmSync(file, { force: true });
  process.env.MSTAR_STAMPS = file;
  try {
    graph.replay();
    addon.synchronize();
  } finally {
    delete process.env.MSTAR_STAMPS;
  }
  if (!existsSync(file)) throw new Error('no stamps: the addon is not a stamps build (MSTAR_CUDA_STAMPS=ON node native/build_addon.mjs)');
  return readFileSync(file, 'utf8').split('\n').filter((l) => l && !l.startsWith('sync')).map((l) => {
    const [ns, blocks, source] = l.split(' ');
    return { ns: Number(ns), blocks: Number(blocks), kind: source.split('/').at(-1).replace(/\.cu$/, '') };
  });
}

/**
 * Layer LAYER's kernels (attention to attention), µs by kind over the whole step (first stamp to
 * last), the step's parts (before the first attention, its layers, after the last attention:
 * the last kernel's own time is not seen) and each layer's µs (attention to attention).
 */
function profile(graph) {
  // The device keeps every stamp since the last dump (the eager forward, the warm-up replays,
  // up to its arrays' size): one replay's dump clears them first.
  stampsOf(graph);
  const layers = [], kinds = new Map(), parts = [], perLayer = [];
  for (let r = 0; r < REPS; r++) {
    const s = stampsOf(graph);
    const att = s.flatMap((x, i) => (x.kind === 'attention' ? [i] : []));
    if (att.length < LAYER + 2) throw new Error(`${att.length} attention stamps in a step; LAYER ${LAYER} needs ${LAYER + 2}`);
    const at = (i) => s[i].ns / 1e3;  // stamp i's time, µs
    const us = (i) => at(i + 1) - at(i);  // kernel i's: its wait's end to the next one's
    layers.push(s.slice(att[LAYER], att[LAYER + 1]).map((x, i) => ({ ...x, us: us(att[LAYER] + i) })));
    const byKind = new Map();
    for (let i = 0; i + 1 < s.length; i++) byKind.set(s[i].kind, (byKind.get(s[i].kind) ?? 0) + us(i));
    for (const [k, total] of byKind) kinds.set(k, [...(kinds.get(k) ?? []), total]);
    parts.push([at(att[0]) - at(0), at(att.at(-1)) - at(att[0]), at(s.length - 1) - at(att.at(-1))]);
    perLayer.push(att.slice(1).map((a, i) => at(a) - at(att[i])));
  }
  const layer = layers[0].map((x, i) => ({ kind: x.kind, blocks: x.blocks, us: median(layers.map((l) => l[i]?.us ?? NaN)) }));
  const each = perLayer[0].map((_, i) => median(perLayer.map((p) => p[i])));
  return {
    layer,
    kinds: [...kinds].map(([k, v]) => [k, median(v)]).sort((a, b) => b[1] - a[1]),
    parts: [0, 1, 2].map((i) => median(parts.map((p) => p[i]))),
    each,
  };
}

console.log(`${dir}: decode at context ${LEN}; layer ${LAYER}'s kernels from its attention (source[blocks] µs), then µs a step by source (first stamp to last) and by part; medians of ${REPS} replays`);
for (const C of SEQS) {
  const layers = {};
  for (const [mode, rowSlot, ws] of setup.modes) {
    model.lora = mode === 'off' ? undefined : pool;
    const s = decodeStep(model, C, LEN, tableWidth, rowSlot);
    const graph = warmCapture(1, () => model.forward(s, kv, ws).dispose());
    for (let r = 0; r < 10; r++) graph.replay();
    addon.synchronize();
    const { layer, kinds, parts, each } = profile(graph);
    layers[mode] = layer;
    const sum = layer.reduce((a, x) => a + x.us, 0);
    console.log(`  c=${C} ${mode}: ${layer.map((x) => `${x.kind}[${x.blocks}] ${x.us.toFixed(2)}`).join(' | ')} (sum ${sum.toFixed(1)})`);
    console.log(`  c=${C} ${mode} by source: ${kinds.map(([k, us]) => `${k} ${us.toFixed(1)}`).join(', ')}`);
    const sorted = [...each].sort((a, b) => a - b);
    console.log(`  c=${C} ${mode} step: before the first attention ${parts[0].toFixed(1)}, layers ${parts[1].toFixed(1)}, after the last ${parts[2].toFixed(1)} µs; a layer min ${sorted[0].toFixed(1)} median ${median(each).toFixed(1)} max ${sorted.at(-1).toFixed(1)} (first ${each[0].toFixed(1)}, last ${each.at(-1).toFixed(1)})`);
    graph.dispose();
    s.dispose();
  }
  for (const mode of Object.keys(layers).filter((m) => m !== 'off')) {
    const off = layers.off, on = layers[mode];
    if (!off || off.length !== on.length) continue;
    console.log(`  c=${C} ${mode} - off: ${on.map((x, i) => `${x.kind} ${(x.us - off[i].us >= 0 ? '+' : '')}${(x.us - off[i].us).toFixed(2)}`).join(' | ')}`);
  }
}
setup.dispose();
