import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import { describe, expect, it } from 'vitest';

import { Tokenizer } from '../../lib/tokenizer/tokenizer.js';

import { answer, expectApiError, makeServer, MODEL_NAME, post, sseEvents, TINY_QWEN3, tinyTokenizer } from './helpers.js';
import type { ChatChunk, ChatResponse } from './shapes.js';

const messages = [
  { role: 'system', content: 'Be brief.' },
  { role: 'user', content: [{ type: 'text', text: 'Hello' }, { type: 'text', text: 'there' }] },
];

describe('POST /v1/chat/completions', () => {
  it('renders the chat template, encodes it without extra special tokens, answers chat.completion', async () => {
    const { app, engine, tokenizer } = makeServer({ script: answer(tinyTokenizer(), 'Hello world') });
    const res = await post(app, '/v1/chat/completions', { model: MODEL_NAME, messages });
    expect(res.statusCode, res.body).toBe(200);
    const rendered = '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello\nthere<|im_end|>\n<|im_start|>assistant\n';
    expect(engine.requests[0].promptIds).toEqual(tokenizer.encode(rendered, { addSpecialTokens: false }));
    // Without max_tokens, chat may use the rest of the context (as vLLM).
    expect(engine.requests[0].params.maxTokens).toBe(256 - engine.requests[0].promptIds.length);
    const body = res.json() as ChatResponse;
    expect(body.id).toMatch(/^chatcmpl-/);
    expect(body.object).toBe('chat.completion');
    expect(body.choices).toEqual([{
      index: 0, message: { role: 'assistant', content: 'Hello world' }, logprobs: null, finish_reason: 'stop', stop_reason: null,
    }]);
    expect(body.usage?.completion_tokens).toBe(tokenizer.encode('Hello world').length + 1);
  });

  it('streams deltas: role first, then content, the same text as the single response', async () => {
    const { app } = makeServer();
    const request = { messages, max_tokens: 30, ignore_eos: true, logprobs: true, top_logprobs: 2 };
    const full = (await post(app, '/v1/chat/completions', request)).json() as ChatResponse;
    const res = await post(app, '/v1/chat/completions', { ...request, stream: true, stream_options: { include_usage: true } });
    const chunks = sseEvents<ChatChunk>(res.body);
    expect(chunks[0].choices[0].delta).toEqual({ role: 'assistant', content: '' });
    expect(chunks.every((c) => c.object === 'chat.completion.chunk')).toBe(true);
    const usage = chunks.at(-1)!;
    expect(usage.choices).toEqual([]);
    expect(usage.usage).toEqual(full.usage);
    const content = chunks.slice(1, -1);
    expect(content.map((c) => c.choices[0].delta?.content ?? '').join('')).toBe(full.choices[0].message?.content);
    expect(content.flatMap((c) => c.choices[0].logprobs?.content ?? [])).toEqual(full.choices[0].logprobs?.content);
    expect(content.at(-1)!.choices[0].finish_reason).toBe('length');
  });

  it('returns chat logprobs as {content: [{token, logprob, bytes, top_logprobs}]}', async () => {
    const { app, tokenizer } = makeServer({ script: answer(tinyTokenizer(), 'Hé', false) });
    const body = (await post(app, '/v1/chat/completions', { messages, max_tokens: 3, logprobs: true, top_logprobs: 2 })).json() as ChatResponse;
    const content = body.choices[0].logprobs!.content;
    const ids = tokenizer.encode('Hé', { addSpecialTokens: false });
    expect(content.map((c) => c.token)).toEqual(ids.map((id) => tokenizer.tokenText(id)));
    for (const entry of content) {
      expect(entry.bytes).toEqual(Array.from(Buffer.from(entry.token, 'utf8')));
      expect(entry.top_logprobs).toHaveLength(2);
      expect(Object.keys(entry.top_logprobs[0]).sort()).toEqual(['bytes', 'logprob', 'token']);
    }
  });

  it('gives no top_logprobs entries when only logprobs: true', async () => {
    const { app } = makeServer();
    const body = (await post(app, '/v1/chat/completions', { messages, max_tokens: 2, logprobs: true })).json() as ChatResponse;
    expect(body.choices[0].logprobs!.content.map((c) => c.top_logprobs)).toEqual([[], []]);
  });

  it('passes chat_template_kwargs and add_generation_prompt to the template', async () => {
    const { app, engine, tokenizer } = makeServer();
    await post(app, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], add_generation_prompt: false, max_tokens: 1 });
    expect(tokenizer.decode(engine.requests[0].promptIds, { skipSpecialTokens: false })).toBe('<|im_start|>user\nx<|im_end|>\n');
  });

  it('refuses a model without a chat template with a 400', async () => {
    const tokenizer = new Tokenizer({
      tokenizerJson: JSON.parse(readFileSync(join(TINY_QWEN3, 'tokenizer.json'), 'utf8')) as Record<string, unknown>,
      tokenizerConfig: { eos_token: '<|im_end|>' },
    });
    expect(tokenizer.chatTemplate).toBeNull();
    const { app } = makeServer({ tokenizer });
    const error = expectApiError(await post(app, '/v1/chat/completions', { messages }), 400, 'messages');
    expect(error.message).toMatch(/no chat template/);
  });

  it('turns a template that raises into a 400', async () => {
    const tokenizer = new Tokenizer({
      tokenizerJson: JSON.parse(readFileSync(join(TINY_QWEN3, 'tokenizer.json'), 'utf8')) as Record<string, unknown>,
      tokenizerConfig: { chat_template: "{% if messages[0].role != 'user' %}{{ raise_exception('first message must be from the user') }}{% endif %}x" },
    });
    const { app } = makeServer({ tokenizer });
    const error = expectApiError(await post(app, '/v1/chat/completions', { messages }), 400, 'messages');
    expect(error.message).toMatch(/first message must be from the user/);
  });
});
