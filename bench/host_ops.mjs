// Where an eager step's host time goes, op by op, on the GPU machine. Every addon function
// and Tensor method is wrapped with a timer; then eager prefill and decode steps run through
// the Engine (graphs off, overlap off), with and without an adapter, and the ops' host time
// per step is printed, largest first. An op that waits for the GPU shows up as a large one.
// SYNC=1 waits for the GPU before and after every op instead: each op's time is then its GPU
// time (plus a launch), which finds the slow kernels of a step.
//
//   node dist/lib/cli/main.js synth --preset qwen3-0.6b --out /tmp/m --adapters 3 --rank 16
//   node bench/host_ops.mjs /tmp/m [rows=8] [promptLen=128]
//
// Needs dist/ and the addon (as bench/gpu_session.sh).
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { addon } from '../dist/lib/addon/index.js';
import { Engine } from '../dist/lib/engine/engine.js';
import { ALL_TARGETS } from '../dist/lib/lora/adapter.js';
import { CPU, cudaPlacement, loadModel } from '../dist/lib/models/index.js';

process.env.MSTAR_CUDA_GRAPHS = '0';
process.env.MSTAR_OVERLAP = '0';
const [dir, rowsArg = '8', lenArg = '128'] = process.argv.slice(2);
const rows = Number(rowsArg), promptLen = Number(lenArg);
const device = process.env.DEVICE ?? 'cuda';  // DEVICE=cpu: to try the script where there is no GPU

/** name -> [calls, total ns] for the phase being measured. */
let times = new Map();
const sync = process.env.SYNC === '1' ? addon.synchronize.bind(addon) : () => {};
const wrap = (obj, name, label) => {
  const fn = Object.getOwnPropertyDescriptor(obj, name)?.value;  // getters (shape, dtype) stay as they are
  if (typeof fn !== 'function' || name === 'constructor') return;
  const timed = function (...args) {
    sync();
    const t0 = process.hrtime.bigint();
    try {
      return fn.apply(this, args);
    } finally {
      sync();
      const e = times.get(label) ?? [0, 0n];
      e[0]++;
      e[1] += process.hrtime.bigint() - t0;
      times.set(label, e);
    }
  };
  try {
    Object.defineProperty(obj, name, { value: timed });
  } catch {
    // (a Tensor's N-API methods cannot be redefined: their time counts as the caller's)
  }
};
const probe = addon.empty('f32', [1], device);
const tensorProto = Object.getPrototypeOf(probe);
for (const name of Object.getOwnPropertyNames(tensorProto)) wrap(tensorProto, name, `tensor.${name}`);
probe.dispose();
for (const name of Object.keys(addon)) wrap(addon, name, name);

const model = loadModel(dir, { placement: device === 'cuda' ? cudaPlacement('bf16') : CPU });
const names = readdirSync(join(dir, 'adapters'));
const engine = new Engine(model, {
  maxModelLen: 4096, maxBatchSize: 64, maxNumBatchedTokens: 8192, blockSize: 16, numBlocks: 4096, prefixCache: false,
  lora: { slots: names.length, maxRank: 16, hostCache: names.length, targets: ALL_TARGETS }, cudaGraphs: false, overlapSteps: false,
});
for (const n of names) await engine.loadAdapter(n, join(dir, 'adapters', n));
// The forward pass alone: enqueueing its ops (the step also uploads, samples, and waits for the samples).
let forwardNs = 0n;
const forward = model.forward.bind(model);
model.forward = (...args) => {
  const t0 = process.hrtime.bigint();
  try {
    return forward(...args);
  } finally {
    forwardNs += process.hrtime.bigint() - t0;
  }
};

let id = 0;
const prompt = (i) => Array.from({ length: promptLen }, (_, j) => 1 + ((i * 7919 + j * 104729) % Math.min(30000, model.config.vocabSize - 2)));
/** Host ms of each op per step, over `steps` steps of the engine (prefill: 1 step, decode: many). */
function measure(label, adapter) {
  for (let i = 0; i < rows; i++) engine.add({ id: `${id++}`, promptIds: prompt(id), params: { maxTokens: 16, temperature: 0, topP: 1, topK: 0, seed: null, stopTokenIds: [], ignoreEos: true, minTokens: 0, logprobs: null }, adapter });
  const phases = [['prefill', 1], ['decode', 10]];
  for (const [phase, steps] of phases) {
    times = new Map();
    forwardNs = 0n;
    addon.synchronize();
    const t0 = process.hrtime.bigint();
    for (let s = 0; s < steps; s++) engine.step();
    const host = Number(process.hrtime.bigint() - t0) / 1e6 / steps;
    addon.synchronize();
    const wall = Number(process.hrtime.bigint() - t0) / 1e6 / steps;
    const ops = [...times].sort((a, b) => Number(b[1][1] - a[1][1]));
    const opMs = ops.reduce((n, [, [, ns]]) => n + Number(ns), 0) / 1e6 / steps;
    const fwd = Number(forwardNs) / 1e6 / steps;
    console.log(`\n${label} ${phase}, ${rows} rows: step ${host.toFixed(2)} ms (forward's host time ${fwd.toFixed(2)} ms; addon calls ${opMs.toFixed(2)} ms), with the GPU's tail ${wall.toFixed(2)} ms`);
    for (const [name, [calls, ns]] of ops.slice(0, 14))
      console.log(`  ${name.padEnd(24)} ${String(calls / steps).padStart(6)} calls  ${(Number(ns) / 1e3 / steps).toFixed(0).padStart(6)} us  ${(Number(ns) / 1e3 / calls).toFixed(1).padStart(7)} us/call`);
  }
  while (engine.hasWork()) engine.step();
}

for (const [label, adapter] of [['warm-up', names[0]], ['base', undefined], ['adapter', names[0]], ['base', undefined], ['adapter', names[0]]]) {
  if (label === 'warm-up') {
    const log = console.log;
    console.log = () => {};
    measure(label, adapter);
    console.log = log;
  } else measure(label, adapter);
}
engine.close();
model.dispose();
