import { describe, expect, it } from 'vitest';

import { nextToken } from './fake_engine.js';
import { answer, makeServer, MODEL_NAME, post, sseEvents, tinyTokenizer } from './helpers.js';
import type { CompletionChunk, CompletionResponse } from './shapes.js';

/** What the fake engine produces after `prompt` for `n` steps. */
function formulaTokens(promptIds: number[], n: number, vocab: number): number[] {
  const out: number[] = [];
  let last = promptIds[promptIds.length - 1];
  for (let i = 0; i < n; i++) out.push((last = nextToken(last, vocab)));
  return out;
}

describe('POST /v1/completions', () => {
  it('answers in the text_completion shape with usage', async () => {
    const { app, engine, tokenizer } = makeServer();
    const res = await post(app, '/v1/completions', { model: MODEL_NAME, prompt: 'Hello world', max_tokens: 5, ignore_eos: true });
    expect(res.statusCode, res.body).toBe(200);
    const body = res.json() as CompletionResponse;
    expect(body.object).toBe('text_completion');
    expect(body.id).toMatch(/^cmpl-[0-9a-f]{32}$/);
    expect(body.model).toBe(MODEL_NAME);
    const promptIds = tokenizer.encode('Hello world');
    expect(engine.requests[0].promptIds).toEqual(promptIds);
    expect(engine.requests[0].id).toBe(body.id);
    // A dangling partial character at the very end is never sent (as vLLM): it could not be completed.
    const expected = tokenizer.decode(formulaTokens(promptIds, 5, tokenizer.vocabSize)).replace(/\uFFFD+$/, '');
    expect(body.choices).toEqual([{ index: 0, text: expected, logprobs: null, finish_reason: 'length', stop_reason: null, prompt_logprobs: null }]);
    expect(body.usage).toEqual({ prompt_tokens: promptIds.length, completion_tokens: 5, total_tokens: promptIds.length + 5, prompt_tokens_details: { cached_tokens: 0 } });
    // A request that ran to its end is not aborted.
    expect(engine.aborted).toEqual([]);
  });

  it('defaults max_tokens to 16 and passes sampling fields to the engine', async () => {
    const { app, engine } = makeServer();
    const res = await post(app, '/v1/completions', {
      prompt: 'Hi', temperature: 0, top_p: 0.5, top_k: -1, seed: 7, stop_token_ids: [5], ignore_eos: true, min_tokens: 2,
    });
    expect(res.statusCode, res.body).toBe(200);
    expect(engine.requests[0].params).toEqual({
      maxTokens: 16, temperature: 0, topP: 0.5, topK: 0, seed: 7, stopTokenIds: [5], ignoreEos: true, minTokens: 2, logprobs: null,
    });
  });

  it('takes a top_k past 32 bits as no top-k, not as its wrapped value', async () => {
    const { app, engine } = makeServer();
    const res = await post(app, '/v1/completions', { prompt: 'Hi', top_k: 2 ** 32 + 1 });
    expect(res.statusCode, res.body).toBe(200);
    expect(engine.requests[0].params.topK).toBe(2 ** 31 - 1);  // 2^32 + 1 would wrap to 1 (greedy) in the engine's int32
  });

  it('takes token ids, and one-element arrays of a prompt', async () => {
    const { app, engine, tokenizer } = makeServer();
    const ids = tokenizer.encode('Hello');
    for (const prompt of [ids, [ids], ['Hello']]) {
      const res = await post(app, '/v1/completions', { prompt, max_tokens: 1 });
      expect(res.statusCode, res.body).toBe(200);
    }
    expect(engine.requests.map((r) => r.promptIds)).toEqual([ids, ids, ids]);
  });

  it('streams the same text, tokens and logprobs as the single response', async () => {
    const { app } = makeServer();
    const request = { prompt: 'Hello world', max_tokens: 40, ignore_eos: true, logprobs: 2 };
    const full = (await post(app, '/v1/completions', request)).json() as CompletionResponse;
    const res = await post(app, '/v1/completions', { ...request, stream: true });
    expect(res.headers['content-type']).toMatch(/^text\/event-stream/);
    const chunks = sseEvents<CompletionChunk>(res.body);
    const text = chunks.map((c) => c.choices[0].text).join('');
    expect(text).toBe(full.choices[0].text);
    const tokens = chunks.flatMap((c) => c.choices[0].logprobs?.tokens ?? []);
    expect(tokens).toEqual(full.choices[0].logprobs?.tokens);
    expect(chunks.flatMap((c) => c.choices[0].logprobs?.text_offset ?? [])).toEqual(full.choices[0].logprobs?.text_offset);
    expect(tokens.length).toBe(40);
    const last = chunks.at(-1)!;
    expect(last.choices[0].finish_reason).toBe('length');
    expect(chunks.slice(0, -1).every((c) => c.choices[0].finish_reason === null)).toBe(true);
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
    expect(chunks.every((c) => c.object === 'text_completion' && c.model === MODEL_NAME)).toBe(true);
    expect(text.length).toBeGreaterThan(0);
  });

  it('sends a usage chunk last with stream_options.include_usage', async () => {
    const { app, tokenizer } = makeServer({ script: answer(tinyTokenizer(), 'Hello world') });
    const res = await post(app, '/v1/completions', { prompt: 'Hi', stream: true, stream_options: { include_usage: true } });
    const chunks = sseEvents<CompletionChunk>(res.body);
    const usageChunk = chunks.at(-1)!;
    expect(usageChunk.choices).toEqual([]);
    const completion = tokenizer.encode('Hello world').length + 1;
    expect(usageChunk.usage).toEqual({
      prompt_tokens: tokenizer.encode('Hi').length, completion_tokens: completion,
      total_tokens: tokenizer.encode('Hi').length + completion, prompt_tokens_details: { cached_tokens: 0 },
    });
    expect(chunks.slice(0, -1).map((c) => c.choices[0].text).join('')).toBe('Hello world');
  });

  it('ends on EOS with finish_reason stop and leaves the EOS text out', async () => {
    const { app } = makeServer({ script: answer(tinyTokenizer(), 'Hello world') });
    const body = (await post(app, '/v1/completions', { prompt: 'Hi', max_tokens: 50, skip_special_tokens: false })).json() as CompletionResponse;
    expect(body.choices[0]).toMatchObject({ text: 'Hello world', finish_reason: 'stop', stop_reason: null });
  });

  it('reports the stop_token_id that ended generation as stop_reason', async () => {
    const tokenizer = tinyTokenizer();
    const ids = tokenizer.encode('Hello world');
    const { app } = makeServer({ script: answer(tokenizer, 'Hello world', false) });
    const body = (await post(app, '/v1/completions', { prompt: 'Hi', max_tokens: 50, stop_token_ids: [ids[4]] })).json() as CompletionResponse;
    expect(body.choices[0]).toMatchObject({ text: tokenizer.decode(ids.slice(0, 4)), finish_reason: 'stop', stop_reason: ids[4] });
    expect(body.usage?.completion_tokens).toBe(5);
  });

  it('returns legacy logprobs: chosen token first in top_logprobs, offsets into the text', async () => {
    const { app, tokenizer } = makeServer({ script: answer(tinyTokenizer(), 'Hello world', false) });
    const body = (await post(app, '/v1/completions', { prompt: 'Hi', max_tokens: 3, logprobs: 2 })).json() as CompletionResponse;
    const lp = body.choices[0].logprobs!;
    const ids = tokenizer.encode('Hello world').slice(0, 3);
    expect(lp.tokens).toEqual(ids.map((id) => tokenizer.tokenText(id)));
    expect(lp.tokens.join('')).toBe(body.choices[0].text);
    expect(lp.token_logprobs.every((x) => typeof x === 'number' && x <= 0)).toBe(true);
    expect(lp.text_offset).toEqual([0, lp.tokens[0].length, lp.tokens[0].length + lp.tokens[1].length]);
    lp.top_logprobs.forEach((top, i) => {
      expect(Object.keys(top)[0] === lp.tokens[i] || lp.tokens[i] in top).toBe(true);
      expect(top[lp.tokens[i]]).toBe(lp.token_logprobs[i]);
      expect(Object.keys(top).length).toBeLessThanOrEqual(3);
    });
  });

  it('names logprob tokens token_id:N with return_tokens_as_token_ids', async () => {
    const { app, tokenizer } = makeServer({ script: answer(tinyTokenizer(), 'Hello', false) });
    const body = (await post(app, '/v1/completions', { prompt: 'Hi', max_tokens: 2, logprobs: 1, return_tokens_as_token_ids: true })).json() as CompletionResponse;
    const ids = tokenizer.encode('Hello').slice(0, 2);
    expect(body.choices[0].logprobs!.tokens).toEqual(ids.map((id) => `token_id:${id}`));
    expect(Object.keys(body.choices[0].logprobs!.top_logprobs[0]).every((k) => /^token_id:\d+$/.test(k))).toBe(true);
    // The text itself stays text.
    expect(body.choices[0].text).toBe(tokenizer.decode(ids));
  });
});
