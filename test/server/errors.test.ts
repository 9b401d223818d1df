import { describe, expect, it } from 'vitest';

import { expectApiError, makeServer, post, tinyTokenizer } from './helpers.js';

const user = [{ role: 'user', content: 'hi' }];

describe('bad requests get OpenAI-shaped errors', () => {
  const { app, engine } = makeServer();

  const completionCases: [string, Record<string, unknown>, string | null][] = [
    ['no prompt', {}, 'prompt'],
    ['empty prompt', { prompt: '' }, 'prompt'],
    ['empty token list', { prompt: [] }, 'prompt'],
    ['token id out of the vocabulary', { prompt: [1, 99999] }, 'prompt'],
    ['several prompts', { prompt: ['a', 'b'] }, 'prompt'],
    ['prompt of the wrong type', { prompt: 5 }, 'prompt'],
    ['max_tokens 0', { prompt: 'a', max_tokens: 0 }, 'max_tokens'],
    ['max_tokens not an integer', { prompt: 'a', max_tokens: 'many' }, 'max_tokens'],
    ['temperature above 2', { prompt: 'a', temperature: 2.5 }, 'temperature'],
    ['temperature negative', { prompt: 'a', temperature: -1 }, 'temperature'],
    ['top_p 0', { prompt: 'a', top_p: 0 }, 'top_p'],
    ['top_p above 1', { prompt: 'a', top_p: 1.5 }, 'top_p'],
    ['top_k -2', { prompt: 'a', top_k: -2 }, 'top_k'],
    ['seed not an integer', { prompt: 'a', seed: 1.5 }, 'seed'],
    ['n 2', { prompt: 'a', n: 2 }, 'n'],
    ['logprobs above 20', { prompt: 'a', logprobs: 21 }, 'logprobs'],
    ['logprobs as a boolean', { prompt: 'a', logprobs: true }, 'logprobs'],
    ['min_tokens above max_tokens', { prompt: 'a', max_tokens: 2, min_tokens: 3 }, 'min_tokens'],
    ['stop not strings', { prompt: 'a', stop: [1] }, 'stop'],
    ['empty stop string', { prompt: 'a', stop: '' }, 'stop'],
    ['stop_token_ids outside the vocabulary', { prompt: 'a', stop_token_ids: [100000] }, 'stop_token_ids'],
    ['ignore_eos not a boolean', { prompt: 'a', ignore_eos: 'yes' }, 'ignore_eos'],
    ['stream_options without stream', { prompt: 'a', stream_options: { include_usage: true } }, 'stream_options'],
    ['include_usage not a boolean', { prompt: 'a', stream: true, stream_options: { include_usage: 1 } }, 'stream_options.include_usage'],
    ['an unsupported penalty', { prompt: 'a', presence_penalty: 0.5 }, 'presence_penalty'],
    ['model not a string', { prompt: 'a', model: 3 }, 'model'],
  ];
  it.each(completionCases)('completions: %s → 400', async (_name, body, param) => {
    expectApiError(await post(app, '/v1/completions', body), 400, param);
  });

  const chatCases: [string, Record<string, unknown>, string | null][] = [
    ['no messages', {}, 'messages'],
    ['empty messages', { messages: [] }, 'messages'],
    ['message without a role', { messages: [{ content: 'x' }] }, 'messages[0].role'],
    ['message that is not an object', { messages: ['x'] }, 'messages[0]'],
    ['image content part', { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, 'messages[0].content[0]'],
    ['top_logprobs without logprobs', { messages: user, top_logprobs: 2 }, 'top_logprobs'],
    ['top_logprobs above 20', { messages: user, logprobs: true, top_logprobs: 21 }, 'top_logprobs'],
    ['max_completion_tokens 0', { messages: user, max_completion_tokens: 0 }, 'max_completion_tokens'],
    ['tools', { messages: user, tools: [{ type: 'function', function: { name: 'f' } }] }, 'tools'],
    ['chat_template_kwargs not an object', { messages: user, chat_template_kwargs: 'x' }, 'chat_template_kwargs'],
  ];
  it.each(chatCases)('chat: %s → 400', async (_name, body, param) => {
    expectApiError(await post(app, '/v1/chat/completions', body), 400, param);
  });

  it('answers 404 model_not_found for another model name', async () => {
    const error = expectApiError(await post(app, '/v1/completions', { model: 'gpt-4', prompt: 'a' }), 404, 'model');
    expect(error).toMatchObject({ message: 'The model `gpt-4` does not exist.', code: 'model_not_found' });
    expectApiError(await post(app, '/v1/chat/completions', { model: 'gpt-4', messages: user }), 404, 'model');
  });

  it('refuses prompt + max_tokens beyond the context with vLLM\'s wording', async () => {
    const prompt = tinyTokenizer().encode('Hello world');
    const error = expectApiError(await post(app, '/v1/completions', { prompt, max_tokens: 250 }), 400, 'max_tokens');
    expect(error.message).toBe(
      `'max_tokens' or 'max_completion_tokens' is too large: 250. This model's maximum context length is 256 tokens and your request has ${prompt.length} input tokens (250 > 256 - ${prompt.length}).`,
    );
    expect(error.code).toBe('context_length_exceeded');
    // Exactly at the limit is fine.
    expect((await post(app, '/v1/completions', { prompt, max_tokens: 256 - prompt.length })).statusCode).toBe(200);
  });

  it('refuses a prompt that fills the context by itself', async () => {
    const long = new Array(256).fill(5);
    const error = expectApiError(await post(app, '/v1/completions', { prompt: long }), 400, 'prompt');
    expect(error.message).toBe(
      "This model's maximum context length is 256 tokens. However, your request has 256 input tokens. Please reduce the length of the input messages.",
    );
    const words = 'word '.repeat(300);
    expectApiError(await post(app, '/v1/chat/completions', { messages: [{ role: 'user', content: words }] }), 400, 'messages');
  });

  it('answers 400 for bad JSON and for a body that is not an object', async () => {
    const res = await app.inject({ method: 'POST', url: '/v1/completions', payload: '{"prompt": ', headers: { 'content-type': 'application/json' } });
    expectApiError(res, 400, null);
    expectApiError(await post(app, '/v1/completions', [1, 2]), 400, null);
    const empty = await app.inject({ method: 'POST', url: '/v1/completions', headers: { 'content-type': 'application/json' } });
    expectApiError(empty, 400, null);
  });

  it('reads a JSON body sent with another content-type (curl -d)', async () => {
    const res = await app.inject({
      method: 'POST', url: '/v1/completions', payload: '{"prompt": "a", "max_tokens": 1}',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expect(res.statusCode, res.body).toBe(200);
  });

  it('answers 404 for an unknown route', async () => {
    const error = expectApiError(await app.inject({ method: 'GET', url: '/v1/nope' }), 404, null);
    expect(error.message).toBe('Unknown request URL: GET /v1/nope.');
    expectApiError(await app.inject({ method: 'GET', url: '/v1/completions' }), 404, null);
  });

  it('answers 413 for a body over the limit', async () => {
    const small = makeServer({ maxBodyBytes: 100 });
    const res = await post(small.app, '/v1/completions', { prompt: 'x'.repeat(200) });
    const error = expectApiError(res, 413, null);
    expect(error.message).toMatch(/100 bytes/);
  });

  it('never reached the engine with any of them', () => {
    // Only the requests that were meant to succeed got there.
    expect(engine.requests.every((r) => r.promptIds.length < 256)).toBe(true);
  });
});

describe('engine failures', () => {
  it('answers 500 in the OpenAI shape when the engine throws', async () => {
    const { app, engine } = makeServer();
    engine.generate = () => ({
      [Symbol.asyncIterator]: () => ({ next: () => Promise.reject(new Error('device lost')) }),
    });
    const error = expectApiError(await post(app, '/v1/completions', { prompt: 'a' }), 500, null);
    expect(error.type).toBe('server_error');
    expect(error.message).toMatch(/device lost/);
  });

  it('sends the error as an event when streaming already started', async () => {
    const { app, engine } = makeServer();
    engine.generate = () => ({
      [Symbol.asyncIterator]: () => ({ next: () => Promise.reject(new Error('device lost')) }),
    });
    const res = await post(app, '/v1/completions', { prompt: 'a', stream: true });
    expect(res.statusCode).toBe(200);
    expect(res.body).toMatch(/^data: \{"error":\{"message":"generation failed: device lost","type":"server_error","param":null,"code":null\}\}\n\ndata: \[DONE\]\n\n$/);
  });
});
