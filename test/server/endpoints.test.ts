import { describe, expect, it } from 'vitest';

import { answer, makeServer, MODEL_NAME, post, TINY_QWEN3, tinyTokenizer } from './helpers.js';

/** The value of one sample line in Prometheus text, e.g. `mstar:num_requests_running{model_name="tiny"}`. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  const want = { model_name: MODEL_NAME, ...labels };
  for (const line of text.split('\n')) {
    const m = /^([^{\s]+)(?:\{([^}]*)\})?\s+(\S+)$/.exec(line);
    if (m === null || m[1] !== name) continue;
    const got = Object.fromEntries((m[2] ?? '').split(',').filter(Boolean).map((kv) => {
      const [k, v] = kv.split('=');
      return [k, JSON.parse(v) as string];
    }));
    if (Object.entries(want).every(([k, v]) => got[k] === v) && Object.keys(got).length === Object.keys(want).length) return Number(m[3]);
  }
  return undefined;
}

describe('GET /v1/models', () => {
  it('lists the served model in the OpenAI list shape', async () => {
    const { app } = makeServer();
    const res = await app.inject({ method: 'GET', url: '/v1/models' });
    expect(res.statusCode).toBe(200);
    const body = res.json() as { object: string; data: Record<string, unknown>[] };
    expect(body.object).toBe('list');
    expect(body.data).toEqual([{
      id: MODEL_NAME, object: 'model', created: expect.any(Number) as number, owned_by: 'mstar', root: TINY_QWEN3, parent: null, max_model_len: 256,
    }]);
  });
});

describe('GET /health', () => {
  it('answers 200 with an empty body', async () => {
    const res = await makeServer().app.inject({ method: 'GET', url: '/health' });
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe('');
  });

  it('answers 503 once the engine has died', async () => {
    const server = makeServer();
    Object.assign(server.engine, { healthy: () => false });
    const res = await server.app.inject({ method: 'GET', url: '/health' });
    expect(res.statusCode).toBe(503);
    expect(res.json().error.message).toMatch(/engine is not running/);
  });
});

describe('GET /metrics', () => {
  it('mirrors engine stats at scrape time', async () => {
    const { app, engine } = makeServer();
    Object.assign(engine.current, { running: 3, waiting: 2, kvBlocksUsed: 25, kvBlocksTotal: 100, preemptions: 4, prefixCacheQueries: 10, prefixCacheHits: 7 });
    const res = await app.inject({ method: 'GET', url: '/metrics' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/plain/);
    expect(sample(res.body, 'mstar:num_requests_running')).toBe(3);
    expect(sample(res.body, 'mstar:num_requests_waiting')).toBe(2);
    expect(sample(res.body, 'mstar:kv_cache_usage_perc')).toBe(0.25);
    expect(sample(res.body, 'mstar:num_preemptions_total')).toBe(4);
    expect(sample(res.body, 'mstar:prefix_cache_queries_total')).toBe(10);
    expect(sample(res.body, 'mstar:prefix_cache_hits_total')).toBe(7);
    engine.current.preemptions = 6;
    const again = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(sample(again, 'mstar:num_preemptions_total')).toBe(6);
  });

  it('counts requests, tokens and latencies after a request', async () => {
    const tokenizer = tinyTokenizer();
    const { app } = makeServer({ script: answer(tokenizer, 'Hello world') });
    const before = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(sample(before, 'mstar:prompt_tokens_total')).toBe(0);
    expect(sample(before, 'mstar:time_to_first_token_seconds_count')).toBe(0);

    await post(app, '/v1/completions', { prompt: 'Hi', max_tokens: 3 });
    await post(app, '/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 50, stream: true });
    const text = (await app.inject({ method: 'GET', url: '/metrics' })).body;

    const chatPrompt = tokenizer.encode('<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n', { addSpecialTokens: false }).length;
    const answered = tokenizer.encode('Hello world').length + 1;
    expect(sample(text, 'mstar:prompt_tokens_total')).toBe(tokenizer.encode('Hi').length + chatPrompt);
    expect(sample(text, 'mstar:generation_tokens_total')).toBe(3 + answered);
    expect(sample(text, 'mstar:request_success_total', { finished_reason: 'length' })).toBe(1);
    expect(sample(text, 'mstar:request_success_total', { finished_reason: 'stop' })).toBe(1);
    expect(sample(text, 'mstar:time_to_first_token_seconds_count')).toBe(2);
    expect(sample(text, 'mstar:e2e_request_latency_seconds_count')).toBe(2);
    expect(sample(text, 'mstar:inter_token_latency_seconds_count')).toBe(2 + answered - 1);
  });

  it('keeps each app on its own registry', async () => {
    const a = makeServer();
    const b = makeServer();
    await post(a.app, '/v1/completions', { prompt: 'Hi', max_tokens: 2 });
    const text = (await b.app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(sample(text, 'mstar:generation_tokens_total')).toBe(0);
  });
});
