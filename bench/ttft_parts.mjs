// Where a long prompt's time to first token goes inside the engine, on the GPU machine: one
// request of L tokens at a time (1 output token, LoRA off, prefix cache on, graphs and
// overlapped steps as the server runs them), stepped as the engine thread steps it (a step()
// call, then setImmediate polls while the GPU works). Per request, ms:
//
//   add      engine.add (the request queued)
//   launch   the step() call that schedules and launches the prefill step
//   forward  the part of launch spent in model.forward (enqueueing the ops)
//   wait     until the step's samples are made (the GPU's share, minus what launch overlapped)
//   read     the step() call that reads the samples and returns the token
//   total    add to token
//
//   node bench/ttft_parts.mjs DIR        (DIR from `mstar synth`; LEN=4096, REPS=8; DEVICE=cpu: to try it without a GPU)
//
// Compare total with `prefill_step.mjs`'s GPU time for the same prompt and with `mstar bench
// --prefill`'s TTFT (which adds HTTP and the engine thread's messages). Needs dist/ and the
// addon (as bench/gpu_session.sh).
import { performance } from 'node:perf_hooks';

import { Engine } from '../dist/lib/engine/engine.js';
import { CPU, cudaPlacement, loadModel } from '../dist/lib/models/index.js';

const dir = process.argv[2];
if (!dir) throw new Error('usage: node bench/ttft_parts.mjs DIR');
const LEN = Number(process.env.LEN ?? 4096), REPS = Number(process.env.REPS ?? 8);
const model = loadModel(dir, { placement: (process.env.DEVICE === 'cpu' ? CPU : cudaPlacement('bf16')) });
const blockSize = 16;
const engine = new Engine(model, {
  maxModelLen: LEN + 16, maxBatchSize: 8, maxNumBatchedTokens: LEN + 16, blockSize,
  numBlocks: 4 * Math.ceil((LEN + 16) / blockSize), prefixCache: true,
});
let forwardMs = 0;
const forward = model.forward.bind(model);
model.forward = (...args) => {
  const t0 = performance.now();
  try {
    return forward(...args);
  } finally {
    forwardMs += performance.now() - t0;
  }
};

const params = { maxTokens: 1, temperature: 0, topP: 1, topK: 0, seed: null, stopTokenIds: [], ignoreEos: true, minTokens: 0, logprobs: null };
const vocab = model.config.vocabSize;
const tick = () => new Promise((r) => setImmediate(r));

/** One request through the engine, stepped as worker.ts steps it. */
async function one(i) {
  const promptIds = Array.from({ length: LEN }, (_, j) => 3 + ((i * 1000003 + j * 7919) % (vocab - 3)));
  forwardMs = 0;
  const t0 = performance.now();
  engine.add({ id: `r${i}`, promptIds, params });
  const t1 = performance.now();
  let launch = 0, read = 0, wait = 0, got = 0;
  while (got === 0) {
    if (engine.awaitingGpu()) {
      const w = performance.now();
      await tick();
      wait += performance.now() - w;
      continue;
    }
    const s = performance.now();
    const outs = engine.step();
    const ms = performance.now() - s;
    got = outs.reduce((n, o) => n + o.newTokenIds.length, 0);
    if (got) read += ms;
    else launch += ms;
  }
  const t2 = performance.now();
  // The request finished on its token: step until the engine lets it go.
  while (engine.hasWork()) {
    if (engine.awaitingGpu()) await tick();
    else engine.step();
  }
  return { add: t1 - t0, launch, forward: forwardMs, wait, read, total: t2 - t0 };
}

const rows = [];
for (let i = 0; i < REPS; i++) rows.push(await one(i));
const keys = ['add', 'launch', 'forward', 'wait', 'read', 'total'];
console.log(`${dir}: ${LEN}-token prompts, one at a time; ms per request (the first pays new GEMM plans)`);
console.log(keys.map((k) => k.padStart(8)).join(''));
for (const r of rows) console.log(keys.map((k) => r[k].toFixed(2).padStart(8)).join(''));
const median = (k) => [...rows.slice(1)].map((r) => r[k]).sort((a, b) => a - b)[(rows.length - 1) >> 1];
console.log(`median of the others: ${keys.map((k) => `${k} ${median(k).toFixed(2)}`).join(', ')}`);
engine.close();
