// The engine thread: loads the model, then steps whenever there is work. Between steps it
// returns to its event loop, so new requests and aborts join the very next step.
import { performance } from 'node:perf_hooks';
import { parentPort, workerData } from 'node:worker_threads';

import { addon } from '../addon/index.js';
import { CPU, cudaPlacement, loadModel, type Placement } from '../models/index.js';
import { Engine, EngineError } from './engine.js';
import { engineLimits, LimitsError } from './options.js';
import type { FromEngine, ToEngine, WorkerInit } from './protocol.js';
import { RequestTracer, traceSetting, wallClock } from './trace.js';

const port = parentPort!;
const send = (m: FromEngine): void => port.postMessage(m);

/** device auto: cuda when a GPU is usable, else the cpu backend with a one-line notice. */
function pickPlacement(init: WorkerInit): Placement {
  const cuda = addon.cudaDevices();
  if (init.device === 'cpu') return CPU;
  if (cuda.count > 0) return cudaPlacement(init.dtype === 'f32' ? 'f32' : 'bf16');
  if (init.device === 'cuda') throw new Error(`device: cuda, but no CUDA device is usable: ${cuda.error ?? 'none found'}`);
  send({ type: 'progress', message: `no usable CUDA device (${cuda.error ?? 'none found'}); using the cpu backend` });
  return CPU;
}

async function start(init: WorkerInit): Promise<Engine> {
  const placement = pickPlacement(init);
  let lastPct = -1;
  const model = loadModel(init.model, {
    // On the cpu, dtype only sets how weights are stored; compute is f32 whatever it says.
    dtype: init.dtype,
    placement,
    onProgress: (p) => {
      const pct = Math.floor((100 * p.loaded) / p.total);
      if (pct >= lastPct + 10 || p.loaded === p.total) {
        lastPct = pct;
        send({ type: 'progress', message: `loading weights: ${pct}% (${p.loaded}/${p.total} tensors, ${(p.bytes / 2 ** 20).toFixed(1)} MiB)` });
      }
    },
  });
  const limits = engineLimits(model.config, init, placement, { weights: model.weights });
  send({ type: 'progress', message: `${placement.device} backend; KV cache: ${limits.numBlocks} blocks of ${limits.blockSize} tokens (${placement.kv})` });
  if (limits.lora) {
    const { slots, maxRank, targets } = limits.lora;
    send({ type: 'progress', message: `adapter pool: ${slots} slots of rank ${maxRank} on ${targets.join(', ')}` });
  }
  const engine = new Engine(model, limits, { onProgress: (message) => send({ type: 'progress', message }) });
  for (const a of init.lora?.adapters ?? []) {
    await engine.loadAdapter(a.name, a.path);
    send({ type: 'progress', message: `adapter ${a.name} loaded from ${a.path}` });
  }
  const t0 = performance.now();
  const captured = engine.captureGraphs();
  if (captured > 0) send({ type: 'progress', message: `cuda graphs: ${captured} captured in ${((performance.now() - t0) / 1000).toFixed(1)} s` });
  if (placement.device === 'cuda') send({ type: 'progress', message: 'warming up eager step shapes' });
  const t1 = performance.now();
  const warmed = engine.warmUpEagerSteps();
  if (warmed > 0) send({ type: 'progress', message: `eager step shapes: ${warmed} warm-up steps in ${((performance.now() - t1) / 1000).toFixed(1)} s` });
  const mergeMs = engine.lora?.mergeCostMs();
  if (mergeMs !== undefined) send({ type: 'progress', message: `merge_after_steps auto: a merge and its unmerge take ${mergeMs.toFixed(2)} ms (rehearsed)` });
  return engine;
}

const adapters = () => engine.lora?.list() ?? [];

let engine: Engine;
try {
  engine = await start(workerData as WorkerInit);
  send({ type: 'ready', info: engine.info, stats: engine.stats(), adapters: adapters() });
} catch (e) {
  send({ type: 'fatal', message: (e as Error).message, config: e instanceof LimitsError });
  process.exit(1);
}

/** MSTAR_TRACE: the requests' first outputs carry their times here (trace.ts). */
const tracer = ((workerData as WorkerInit).trace ?? traceSetting()) ? new RequestTracer() : undefined;

let stepping = false;
function loop(): void {
  if (!engine.hasWork()) {
    stepping = false;
    return;
  }
  // A step's samples are still being made: come back at the next turn of the event loop,
  // which handles new requests and aborts meanwhile.
  if (engine.awaitingGpu()) {
    setImmediate(loop);
    return;
  }
  const stepsBefore = engine.stats().steps;
  let ran = false;
  try {
    const start = tracer ? wallClock() : 0;
    const outputs = engine.step();
    tracer?.stepped(outputs, start, wallClock());
    const stats = engine.stats();  // once per step: it walks the waiting list
    // Progress: a step ran, or an overlapped step's samples were read.
    ran = stats.steps !== stepsBefore || outputs.length > 0;
    if (ran) send({ type: 'outputs', outputs, stats });
  } catch (e) {
    send({ type: 'fatal', message: `engine step failed: ${(e as Error).stack ?? e}` });
    process.exit(1);
  }
  // Nothing could run (every waiting request waits for an adapter coming off the disk):
  // poll gently instead of spinning.
  if (ran || engine.hasDue()) setImmediate(loop);
  else setTimeout(loop, 1);
}

port.on('message', (m: ToEngine) => {
  if (m.type === 'add') {
    tracer?.received(m.request.id);
    try {
      engine.add(m.request);
    } catch (e) {
      if (!(e instanceof EngineError)) throw e;
      tracer?.forget(m.request.id);
      send({ type: 'rejected', id: m.request.id, message: e.message });
      return;
    }
    if (!stepping) {
      stepping = true;
      setImmediate(loop);
    }
  } else if (m.type === 'loadAdapter') {
    // The stats go along: an idle engine sends no outputs to refresh the adapter gauges.
    engine.loadAdapter(m.name, m.path).then(
      () => send({ type: 'adapterResult', call: m.call, adapters: adapters(), found: true, stats: engine.stats() }),
      (e: Error) => send({ type: 'adapterResult', call: m.call, error: e.message, adapters: adapters() }),
    );
  } else if (m.type === 'unloadAdapter') {
    const found = engine.unloadAdapter(m.name);
    send({ type: 'adapterResult', call: m.call, found, adapters: adapters(), stats: engine.stats() });
  } else if (m.type === 'abort') {
    tracer?.forget(m.id);
    const out = engine.abort(m.id);
    if (out) send({ type: 'outputs', outputs: [out], stats: engine.stats() });
  } else {
    // 'close' arrives between steps (this thread runs one thing at a time): stop here.
    engine.close();
    process.exit(0);
  }
});
