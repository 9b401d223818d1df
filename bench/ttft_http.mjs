// A long prompt's TTFT through the HTTP server, split into the server's share and the
// client's: starts `mstar serve` on DIR/serve.yaml, sends REPS requests of LEN random token
// ids (1 output token, streamed) one at a time with two clients, fetch and node:http (as
// `mstar bench` sends them), and reads the server's own TTFT histogram
// (from the request's arrival to its first token) from /metrics. Compare with
// bench/ttft_parts.mjs (the engine alone) and prefill_step.mjs (the GPU alone).
//
//   node bench/ttft_http.mjs DIR       (LEN=4096, REPS=8, PORT=8011)
//
// Needs dist/ and the addon (as bench/gpu_session.sh).
import { spawn } from 'node:child_process';
import { request } from 'node:http';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';

import { median } from './median.mjs';

const dir = process.argv[2];
if (!dir) throw new Error('usage: node bench/ttft_http.mjs DIR');
const LEN = Number(process.env.LEN ?? 4096), REPS = Number(process.env.REPS ?? 8), PORT = Number(process.env.PORT ?? 8011);
const url = `http://127.0.0.1:${PORT}`;
const server = spawn(process.execPath, ['dist/lib/cli/main.js', 'serve', '-c', join(dir, 'serve.yaml'), '--port', String(PORT)], { stdio: ['ignore', 'ignore', 'inherit'] });
try {
  for (let i = 0; ; i++) {
    if (i > 600) throw new Error('the server did not start in 5 minutes');
    const up = await fetch(`${url}/health`).then((r) => r.ok, () => false);
    if (up) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  const model = (await (await fetch(`${url}/v1/models`)).json()).data[0].id;
  let seq = 0;
  const body = () => JSON.stringify({
    model, prompt: Array.from({ length: LEN }, (_, j) => 3 + ((++seq * 7919 + j * 104729) % 100000)), max_tokens: 1,
    ignore_eos: true, temperature: 0, stream: true,
  });
  /** ms from send to the first data chunk, with fetch. */
  const viaFetch = async () => {
    const b = body(), t0 = performance.now();
    const res = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: b });
    const reader = res.body.getReader();
    const { value } = await reader.read();
    const ms = performance.now() - t0;
    if (!new TextDecoder().decode(value).includes('data:')) throw new Error('no data chunk first');
    while (!(await reader.read()).done);
    return ms;
  };
  /** The same with node:http. */
  const viaHttp = () => new Promise((resolve, reject) => {
    const b = body(), t0 = performance.now();
    let ms;
    const req = request(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(b) } }, (res) => {
      res.on('data', () => { ms ??= performance.now() - t0; });
      res.on('end', () => resolve(ms));
    });
    req.on('error', reject);
    req.end(b);
  });
  const serverTtft = async () => {
    const text = await (await fetch(`${url}/metrics`)).text();
    const value = (name) => Number(text.match(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm'))?.[1] ?? NaN);
    return [value('mstar:time_to_first_token_seconds_sum'), value('mstar:time_to_first_token_seconds_count')];
  };
  await viaFetch();  // new GEMM plans, connections
  await viaHttp();
  for (const [name, send] of [['fetch', viaFetch], ['node:http', viaHttp]]) {
    const [s0, c0] = await serverTtft();
    const ms = [];
    for (let i = 0; i < REPS; i++) ms.push(await send());
    const [s1, c1] = await serverTtft();
    console.log(`${name.padEnd(9)} client TTFT p50 ${median(ms).toFixed(2)} ms (min ${Math.min(...ms).toFixed(2)}); ` +
      `server TTFT mean ${((1000 * (s1 - s0)) / (c1 - c0)).toFixed(2)} ms over ${c1 - c0}`);
  }
} finally {
  server.kill();
}
