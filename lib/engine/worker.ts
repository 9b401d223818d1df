// The engine thread: loads the model, then steps whenever there is work. Between steps it
// returns to its event loop, so new requests and aborts join the very next step.
import { parentPort, workerData } from 'node:worker_threads';

import { addon } from '../addon/index.js';
import { loadModel } from '../models/index.js';
import { Engine, EngineError } from './engine.js';
import { engineLimits } from './options.js';
import type { FromEngine, ToEngine, WorkerInit } from './protocol.js';

const port = parentPort!;
const send = (m: FromEngine): void => port.postMessage(m);

function pickDevice(want: WorkerInit['device']): 'cpu' {
  if (want === 'cpu') return 'cpu';
  const cuda = addon.cudaDevices();
  if (want === 'cuda') {
    throw new Error(cuda.count > 0
      ? 'device: cuda — this build runs models on the cpu backend only for now'
      : `device: cuda, but no CUDA device is usable: ${cuda.error ?? 'none found'}`);
  }
  send({ type: 'progress', message: `no usable CUDA backend (${cuda.count > 0 ? 'CUDA model path not built yet' : cuda.error}); using the cpu backend` });
  return 'cpu';
}

function start(init: WorkerInit): Engine {
  pickDevice(init.device);
  let lastPct = -1;
  const model = loadModel(init.model, {
    dtype: init.dtype,
    onProgress: (p) => {
      const pct = Math.floor((100 * p.loaded) / p.total);
      if (pct >= lastPct + 10 || p.loaded === p.total) {
        lastPct = pct;
        send({ type: 'progress', message: `loading weights: ${pct}% (${p.loaded}/${p.total} tensors, ${(p.bytes / 2 ** 20).toFixed(1)} MiB)` });
      }
    },
  });
  const limits = engineLimits(model.config, init);
  send({ type: 'progress', message: `KV cache: ${limits.numBlocks} blocks of ${limits.blockSize} tokens` });
  const engine = new Engine(model, limits);
  for (const a of init.lora?.adapters ?? []) {
    engine.loadAdapter(a.name, a.path);
    send({ type: 'progress', message: `adapter ${a.name} loaded from ${a.path}` });
  }
  return engine;
}

const adapters = () => engine.lora?.list() ?? [];

let engine: Engine;
try {
  engine = start(workerData as WorkerInit);
  send({ type: 'ready', info: engine.info, stats: engine.stats(), adapters: adapters() });
} catch (e) {
  send({ type: 'fatal', message: (e as Error).message });
  process.exit(1);
}

let stepping = false;
function loop(): void {
  if (!engine.hasWork()) {
    stepping = false;
    return;
  }
  try {
    const outputs = engine.step();
    send({ type: 'outputs', outputs, stats: engine.stats() });
  } catch (e) {
    send({ type: 'fatal', message: `engine step failed: ${(e as Error).stack ?? e}` });
    process.exit(1);
  }
  setImmediate(loop);
}

port.on('message', (m: ToEngine) => {
  if (m.type === 'add') {
    try {
      engine.add(m.request);
    } catch (e) {
      if (!(e instanceof EngineError)) throw e;
      send({ type: 'rejected', id: m.request.id, message: e.message });
      return;
    }
    if (!stepping) {
      stepping = true;
      setImmediate(loop);
    }
  } else if (m.type === 'loadAdapter') {
    try {
      engine.loadAdapter(m.name, m.path);
      send({ type: 'adapterResult', call: m.call, adapters: adapters(), found: true });
    } catch (e) {
      send({ type: 'adapterResult', call: m.call, error: (e as Error).message, adapters: adapters() });
    }
  } else if (m.type === 'unloadAdapter') {
    const found = engine.unloadAdapter(m.name);
    send({ type: 'adapterResult', call: m.call, found, adapters: adapters() });
  } else if (m.type === 'abort') {
    const out = engine.abort(m.id);
    if (out) send({ type: 'outputs', outputs: [out], stats: engine.stats() });
  } else {
    port.close();
  }
});
