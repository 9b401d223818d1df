// The whole server over real HTTP, on the real engine thread (CPU backend, tiny Qwen3).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { SENT_AT_HEADER } from '../../lib/server/trace.js';
import { readParityFixture } from '../parity/fixture.js';
import { prompts } from '../engine/helpers.js';
import { completionTokens, startServer, type RealServer } from './real_server.js';

const greedy = (prompt: number[], maxTokens: number, extra: Record<string, unknown> = {}) => ({
  model: 'tiny', prompt, max_tokens: maxTokens, temperature: 0, ignore_eos: true, logprobs: 0, return_tokens_as_token_ids: true, ...extra,
});

describe('mstar serve, end to end', () => {
  let s: RealServer;
  beforeAll(async () => {
    s = await startServer();
  });
  afterAll(() => s.close());

  it('gives the HF greedy tokens, streamed and not', async () => {
    const fx = readParityFixture('tiny-qwen3');
    for (const c of fx.cases) {
      const plain = await completionTokens(await s.post('/v1/completions', greedy(c.promptIds, c.outputIds.length)), false);
      const streamed = await completionTokens(await s.post('/v1/completions', greedy(c.promptIds, c.outputIds.length, { stream: true })), true);
      expect(plain).toEqual(c.outputIds);
      expect(streamed).toEqual(c.outputIds);
    }
  });

  it('16 concurrent requests of mixed lengths get the tokens they get one at a time', async () => {
    const ps = prompts([3, 50, 7, 19, 1, 33, 64, 12, 5, 27, 40, 2, 9, 15, 22, 80], 512, 5);
    const one: number[][] = [];
    for (const p of ps) one.push(await completionTokens(await s.post('/v1/completions', greedy(p, 6)), false));
    const all = await Promise.all(ps.map(async (p, i) =>
      completionTokens(await s.post('/v1/completions', greedy(p, 6, { stream: i % 2 === 0 })), i % 2 === 0)));
    expect(all).toEqual(one);
  });

  it('a client that disconnects mid-stream frees its KV blocks at once', async () => {
    const ac = new AbortController();
    const res = await s.post('/v1/completions', greedy([5, 6, 7], 200, { stream: true }), { signal: ac.signal });
    const reader = res.body!.getReader();
    await reader.read();
    expect(await s.metric('mstar:kv_cache_usage_perc')).toBeGreaterThan(0);
    ac.abort();
    for (let i = 0; i < 100 && (await s.metric('mstar:num_requests_running')) > 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(await s.metric('mstar:num_requests_running')).toBe(0);
    expect(await s.metric('mstar:kv_cache_usage_perc')).toBe(0);
  });

  it('answers bad input with OpenAI-shaped errors', async () => {
    const unknown = await s.post('/v1/completions', { model: 'nope', prompt: 'x' });
    expect(unknown.status).toBe(404);
    expect((await unknown.json()).error).toMatchObject({ param: 'model', code: 'model_not_found' });
    const long = await s.post('/v1/completions', { model: 'tiny', prompt: [1, 2, 3], max_tokens: 300 });
    expect(long.status).toBe(400);
    expect((await long.json()).error.message).toMatch(/256/);
    const bad = await s.post('/v1/completions', '{"model": ');
    expect(bad.status).toBe(400);
    expect((await fetch(`${s.url}/health`)).status).toBe(200);
  });
});

describe('preemption under a tiny KV budget', () => {
  let s: RealServer;
  beforeAll(async () => {
    s = await startServer((c) => {
      c.kv_cache = { block_size: 4, num_blocks: 48 };
      c.max_seq_len = 192;  // everything the 48 blocks hold
    });
  });
  afterAll(() => s.close());

  const LONG = 160;  // the long request's tokens: with its prompt, 45 of the 48 blocks

  it('still completes every request with the right tokens', async () => {
    const long = prompts([20], 512, 3)[0];
    const ps = prompts([30, 25, 40, 12, 33], 512, 11);
    const longAlone = await completionTokens(await s.post('/v1/completions', greedy(long, LONG)), false);
    const one: number[][] = [];
    for (const p of ps) one.push(await completionTokens(await s.post('/v1/completions', greedy(p, 12)), false));
    // The long request is running (its first chunk is out) before the others arrive, and it
    // alone nearly fills the cache as it grows: someone must be preempted, if the others
    // arrive while one of them still fits. Whether they do is timing (about one run in six
    // saw none, here and in clean-clone CI, at 70 tokens over 24 blocks and at 160 over 48):
    // the scenario runs again, up to five times, until a preemption happens; every run must
    // give every request its tokens.
    for (let attempt = 0; attempt < 5 && (await s.metric('mstar:num_preemptions_total')) === 0; attempt++) {
      const res = await s.post('/v1/completions', greedy(long, LONG, { stream: true }));
      const reader = res.body!.getReader();
      const first = await reader.read();
      const rest = Promise.all(ps.map(async (p) => completionTokens(await s.post('/v1/completions', greedy(p, 12)), false)));
      let text = new TextDecoder().decode(first.value);
      for (let r = await reader.read(); !r.done; r = await reader.read()) text += new TextDecoder().decode(r.value);
      expect(await completionTokens(new Response(text), true)).toEqual(longAlone);
      expect(await rest).toEqual(one);
    }
    expect(await s.metric('mstar:num_preemptions_total')).toBeGreaterThan(0);
    expect(await s.metric('mstar:kv_cache_usage_perc')).toBe(0);
  }, 30_000);
});

describe('MSTAR_TRACE', () => {
  it('gives a streamed request one line, its first token\'s times in order from the client\'s send', async () => {
    const lines: string[] = [];
    const s = await startServer(undefined, {}, (line) => lines.push(line));
    try {
      const sentAt = performance.timeOrigin + performance.now();
      const headers = { 'content-type': 'application/json', [SENT_AT_HEADER]: String(sentAt) };
      await (await s.post('/v1/completions', greedy([5, 6, 7], 3, { stream: true }), { headers })).text();
      await (await s.post('/v1/completions', greedy([5, 6, 7], 3))).json();  // not streamed: no line
      expect(lines).toHaveLength(1);
      const m = /^mstar trace cmpl-\S+: sent (\S+), engine thread (\S+), launch (\S+) to (\S+), read (\S+) to (\S+), HTTP thread (\S+), written (\S+) \(ms/.exec(lines[0]);
      expect(m, lines[0]).not.toBeNull();
      const [sent, received, launchStart, launchEnd, readStart, readEnd, delivered, written] = m!.slice(1).map(Number);
      expect(sent).toBeLessThan(0);  // before the handler began
      expect(received).toBeGreaterThanOrEqual(0);
      // (On the cpu one step() both launches and reads: the same times.)
      for (const [before, after] of [[received, launchStart], [launchStart, launchEnd], [launchStart, readStart], [launchEnd, readEnd],
        [readStart, readEnd], [readEnd, delivered], [delivered, written]]) expect(after).toBeGreaterThanOrEqual(before);
    } finally {
      await s.close();
    }
  });
});
