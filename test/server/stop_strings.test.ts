import { describe, expect, it } from 'vitest';

import { StopStringMatcher } from '../../lib/tokenizer/stop_strings.js';
import { answer, makeServer, post, sseEvents, tinyTokenizer } from './helpers.js';
import type { ChatChunk, ChatResponse, CompletionChunk, CompletionResponse } from './shapes.js';

describe('StopStringMatcher', () => {
  it('holds back only a tail that could still become a stop string', () => {
    const m = new StopStringMatcher(['STOP', 'xyz']);
    expect(m.push('abc S')).toEqual({ text: 'abc ', stop: null });
    expect(m.push('T')).toEqual({ text: '', stop: null });
    expect(m.push('a')).toEqual({ text: 'STa', stop: null });
    expect(m.push(' x')).toEqual({ text: ' ', stop: null });
    expect(m.flush()).toBe('x');
  });

  it('cuts before the earliest stop string and ignores later text', () => {
    const m = new StopStringMatcher(['world', 'lo w']);
    expect(m.push('Hel')).toEqual({ text: 'He', stop: null });
    expect(m.push('lo world')).toEqual({ text: 'l', stop: 'lo w' });
    expect(m.push('more')).toEqual({ text: '', stop: null });
  });

  it('does not look for stops while told not to, but still holds back', () => {
    const m = new StopStringMatcher(['ab']);
    expect(m.push('xab', false)).toEqual({ text: 'xab', stop: null });
    expect(m.push('a', false)).toEqual({ text: '', stop: null });
    expect(m.push('b')).toEqual({ text: '', stop: 'ab' });
  });
});

describe('stop strings through the API', () => {
  // "Hello world" is H|e|ll|o| w|or|l|d in the tiny tokenizer: "o wo" spans three tokens.
  const script = answer(tinyTokenizer(), 'Hello world and more');

  it('cuts the text before a stop string split across tokens and aborts the engine request', async () => {
    const { app, engine } = makeServer({ script });
    const body = (await post(app, '/v1/completions', { prompt: 'Hi', max_tokens: 50, stop: 'o wo' })).json() as CompletionResponse;
    expect(body.choices[0]).toMatchObject({ text: 'Hell', finish_reason: 'stop', stop_reason: 'o wo' });
    expect(engine.aborted).toEqual([body.id]);
    // Tokens up to and including the one that completed the stop string.
    expect(body.usage?.completion_tokens).toBe(tinyTokenizer().encode('Hello wor').length);
  });

  it('never streams a piece of the stop string', async () => {
    const { app, engine } = makeServer({ script });
    const res = await post(app, '/v1/completions', { prompt: 'Hi', max_tokens: 50, stop: ['zzz', 'o wo'], stream: true });
    const chunks = sseEvents<CompletionChunk>(res.body);
    expect(chunks.map((c) => c.choices[0].text).join('')).toBe('Hell');
    expect(chunks.at(-1)!.choices[0]).toMatchObject({ finish_reason: 'stop', stop_reason: 'o wo' });
    expect(engine.aborted).toHaveLength(1);
  });

  it('works for chat too, and the held-back text is released when no stop comes', async () => {
    const { app } = makeServer({ script });
    const stopped = (await post(app, '/v1/chat/completions', { messages: [{ role: 'user', content: 'q' }], stop: ['and'] })).json() as ChatResponse;
    expect(stopped.choices[0].message?.content).toBe('Hello world ');
    const res = await post(app, '/v1/chat/completions', { messages: [{ role: 'user', content: 'q' }], stop: ['more!'], stream: true });
    const text = sseEvents<ChatChunk>(res.body).map((c) => c.choices[0].delta?.content ?? '').join('');
    expect(text).toBe('Hello world and more');
  });

  it('ignores stop strings until min_tokens were generated', async () => {
    const { app } = makeServer({ script });
    const body = (await post(app, '/v1/completions', { prompt: 'Hi', max_tokens: 50, stop: ['H'], min_tokens: 1 })).json() as CompletionResponse;
    expect(body.choices[0].text).toBe('Hello world and more');
  });
});
