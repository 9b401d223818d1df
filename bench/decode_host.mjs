// What a decode step costs beyond its graph, on the GPU machine: C sequences decoding together
// (LoRA off, graphs and overlapped steps as the server runs them, stepped as the engine thread
// steps it), against the same bucket's captured graph replayed back to back. Per step, µs:
//
//   engine        wall time a decode step in the engine loop (every step of the run's middle)
//   graph         the engine's captured graph alone, replayed back to back
//   forward       a graph of the model's forward alone (no feedTokens, no sampling), on the
//                 same inputs, replayed back to back
//   feed+sample   a graph of feedTokens and sampling alone, replayed back to back
//   + uploads     each replay after the five uploads, as the engine enqueues them (here the
//                 host cannot run more than a step ahead: an upload's pinned buffer waits for
//                 its last copy, so this overstates what the engine, a step ahead, pays)
//   + readback    each replay then followed by the ids' copy to pinned memory and its fence
//
//   node bench/decode_host.mjs DIR      (DIR from `mstar synth`; SEQS=1,8 STEPS=400 REPS=3;
//                                        MAXLEN=8192: the engine's max_model_len, which sets the tables' width)
//
// engine - graph: what the host adds to a step (nothing measured at 1-32 sequences: the engine
// keeps a step ahead); graph - forward: feedTokens and sampling; forward against
// decode_step.mjs (several forwards in one graph, the next one's start overlapping): the cost
// of a graph's boundary. Needs dist/ and the addon (as bench/gpu_session.sh).
import { performance } from 'node:perf_hooks';

import { addon } from '../dist/lib/addon/index.js';
import { Engine } from '../dist/lib/engine/engine.js';
import { GraphRunner } from '../dist/lib/engine/graph_runner.js';
import { cudaPlacement, loadModel } from '../dist/lib/models/index.js';
import { median } from './median.mjs';

const dir = process.argv[2];
if (!dir) throw new Error('usage: node bench/decode_host.mjs DIR');
const SEQS = (process.env.SEQS ?? '1,8').split(',').map(Number);
const STEPS = Number(process.env.STEPS ?? 400), REPS = Number(process.env.REPS ?? 3);
const PROMPT = 128, MAXLEN = Number(process.env.MAXLEN ?? 8192);
const model = loadModel(dir, { placement: cudaPlacement('bf16') });
const vocab = model.config.vocabSize;
const maxSeqs = Math.max(...SEQS);
const engine = new Engine(model, {
  maxModelLen: Math.max(MAXLEN, PROMPT + STEPS + 64), maxBatchSize: maxSeqs, maxNumBatchedTokens: Math.max(2048, maxSeqs * PROMPT), blockSize: 16,
  numBlocks: maxSeqs * Math.ceil((PROMPT + STEPS + 64) / 16) + 64, prefixCache: false,
});
engine.captureGraphs();
const params = { maxTokens: STEPS + 32, temperature: 0, topP: 1, topK: 0, seed: null, stopTokenIds: [], ignoreEos: true, minTokens: 0, logprobs: null };
const tick = () => new Promise((r) => setImmediate(r));
let serial = 0;

/** µs a decode step over the middle STEPS - 32 steps of C sequences, stepped as worker.ts does. */
async function engineStepUs(C) {
  for (let i = 0; i < C; i++) {
    const promptIds = Array.from({ length: PROMPT }, (_, j) => 3 + ((serial * 1000003 + i * 7717 + j * 7919) % (vocab - 3)));
    engine.add({ id: `r${serial}-${i}`, promptIds, params });
  }
  serial++;
  let tokens = 0, t0 = 0, t1 = 0, steps = 0;
  while (engine.hasWork()) {
    if (engine.awaitingGpu()) {
      await tick();
      continue;
    }
    const outs = engine.step();
    engine.stats();  // as worker.ts, once a step
    tokens += outs.filter((o) => o.id.endsWith('-0')).reduce((n, o) => n + o.newTokenIds.length, 0);
    if (tokens >= 16 && !t0) { t0 = performance.now(); tokens = 0; }
    if (t0 && !t1 && tokens >= STEPS - 32) {
      t1 = performance.now();
      steps = tokens;
    }
  }
  return ((t1 - t0) / steps) * 1e3;
}

const graphs = engine.runner.graphs;
/**
 * µs a replay of bucket C's graph (or of a graph of `ops(views)`), `each` enqueued before every
 * replay and `after` after it.
 */
function graphStepUs(C, each = () => {}, after = () => {}, ops = undefined) {
  const v = graphs.viewsFor(C);
  const graph = ops ? addon.captureGraph(() => ops(v)) : graphs.graphs.get(`${C}/base`);  // graph_runner.ts's graphKey
  if (!graph || !('replay' in graph)) throw new Error(`no graph for bucket ${C}: ${[...graphs.graphs.keys()]}`);
  const run = (n) => {
    for (let i = 0; i < n; i++) {
      each(v);
      graph.replay();
      after(v, i);
    }
    addon.synchronize();
  };
  run(20);
  const t0 = performance.now();
  run(STEPS);
  const us = ((performance.now() - t0) / STEPS) * 1e3;
  if (ops) graph.dispose();
  return us;
}

const upload = GraphRunner.prototype.upload;
const forwardOnly = (v) => model.forward({ ...v.step, lora: undefined }, graphs.kv, graphs.statics.ws).dispose();
const feedAndSample = (v) => {
  const lora = v.step.lora;
  addon.feedTokens(v.step.tokens, lora.embedRows, graphs.ids, v.fromRows, lora.rowSlots, vocab);
  const logits = graphs.statics.ws.take('logits', v.step.logitRows.shape[0], vocab);
  addon.sample(v.ids, logits, v.temperature, v.topK, v.topP, v.seeds, v.steps);
};
const rows = [];
for (const C of SEQS) {
  const r = { C, engine: [], graph: [], forward: [], feedSample: [], uploads: [], readback: [] };
  for (let rep = 0; rep < REPS; rep++) {
    r.engine.push(await engineStepUs(C));
    r.graph.push(graphStepUs(C));
    r.forward.push(graphStepUs(C, undefined, undefined, forwardOnly));
    r.feedSample.push(graphStepUs(C, undefined, undefined, feedAndSample));
    r.uploads.push(graphStepUs(C, (v) => upload.call(graphs, v, C)));
    let pending;
    r.readback.push(graphStepUs(C, (v) => upload.call(graphs, v, C), (v) => {
      pending?.read();
      pending = graphs.readback.send([v.ids]);
    }));
  }
  rows.push(r);
}
const keys = ['engine', 'graph', 'forward', 'feedSample', 'uploads', 'readback'];
console.log(`${dir}: µs a decode step (medians of ${REPS}), LoRA off, ${STEPS} steps`);
console.log(['C', ...keys].map((k) => k.padStart(11)).join(''));
for (const r of rows) console.log([String(r.C), ...keys.map((k) => median(r[k]).toFixed(1))].map((s) => s.padStart(11)).join(''));
engine.close();
