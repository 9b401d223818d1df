// Shows that the HTTP thread stays free while the engine works: 32 streams generate while
// /health is polled; prints /health latency percentiles next to the generation rate.
//
//   node dist/bench/health_under_load.js [--model DIR] [--streams 32] [--tokens 64] [--device cpu]
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';

import { engineOptionsOf } from '../lib/config/engine_options.js';
import { loadServeConfig } from '../lib/config/load.js';
import { EngineClient } from '../lib/engine/client.js';
import { packageRoot } from '../lib/addon/loader.js';
import { buildApp } from '../lib/server/app.js';
import { Tokenizer } from '../lib/tokenizer/tokenizer.js';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: `${packageRoot()}/test/fixtures/models/tiny-qwen3` },
    streams: { type: 'string', default: '32' },
    tokens: { type: 'string', default: '64' },
    device: { type: 'string', default: 'cpu' },
  },
});
const streams = Number(values.streams), tokens = Number(values.tokens);

const config = loadServeConfig(undefined, { model: values.model, device: values.device, served_model_name: 'm', port: 0 });
const engine = await EngineClient.start(engineOptionsOf(config, (m) => console.log(`mstar: ${m}`)));
const app = buildApp({ engine, tokenizer: Tokenizer.load(config.model), config });
await app.listen({ host: '127.0.0.1', port: 0 });
const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;

async function stream(i: number): Promise<number> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', prompt: [1 + i, 2, 3, 4, 5], max_tokens: tokens, ignore_eos: true, stream: true }),
  });
  await res.text();
  return tokens;
}

const latencies: number[] = [];
let generating = true;
async function pollHealth(): Promise<void> {
  while (generating) {
    const t0 = performance.now();
    const res = await fetch(`${url}/health`);
    await res.arrayBuffer();
    latencies.push(performance.now() - t0);
    await new Promise((r) => setTimeout(r, 5));
  }
}

const t0 = performance.now();
const poller = pollHealth();
const produced = (await Promise.all(Array.from({ length: streams }, (_, i) => stream(i)))).reduce((a, b) => a + b, 0);
const seconds = (performance.now() - t0) / 1000;
generating = false;
await poller;
await app.close();
await engine.close();

latencies.sort((a, b) => a - b);
const pct = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))].toFixed(2);
console.log(`${streams} streams x ${tokens} tokens: ${produced} tokens in ${seconds.toFixed(2)} s (${(produced / seconds).toFixed(0)} tok/s)`);
console.log(`/health while generating: ${latencies.length} polls, p50 ${pct(50)} ms, p99 ${pct(99)} ms, max ${pct(100)} ms`);
