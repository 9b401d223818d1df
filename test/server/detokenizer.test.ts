import { describe, expect, it } from 'vitest';

import { IncrementalDetokenizer, RequestDetokenizer } from '../../lib/tokenizer/detokenizer.js';
import { answer, makeServer, post, sseEvents, tinyTokenizer } from './helpers.js';
import type { CompletionChunk } from './shapes.js';

const tokenizer = tinyTokenizer();

/** No lone surrogate: the string survives a UTF-8 round trip. */
function wellFormed(s: string): boolean {
  return Buffer.from(s, 'utf8').toString('utf8') === s;
}

describe('IncrementalDetokenizer', () => {
  it('never emits half a multi-byte character', () => {
    const ids = tokenizer.encode('a😀é€b', { addSpecialTokens: false });
    // The fixture has no merges for these characters: each byte is its own token.
    expect(ids.length).toBeGreaterThan(5);
    const detok = new IncrementalDetokenizer(tokenizer, tokenizer.encode('x'));
    const pieces = ids.map((id) => detok.push(id));
    expect(pieces.join('')).toBe('a😀é€b');
    for (const piece of pieces) {
      expect(piece).not.toContain('\uFFFD');
      expect(wellFormed(piece)).toBe(true);
    }
    // The emoji's four byte-tokens produce nothing until the last one.
    const emoji = tokenizer.encode('😀', { addSpecialTokens: false }).length;
    expect(pieces.slice(1, emoji)).toEqual(new Array(emoji - 1).fill(''));
    expect(pieces[emoji]).toBe('😀');
  });

  it('drops special tokens from the text unless asked to keep them', () => {
    const ids = [...tokenizer.encode('Hi', { addSpecialTokens: false }), tokenizer.eosTokenIds[0]];
    const skip = new IncrementalDetokenizer(tokenizer, []);
    const keep = new IncrementalDetokenizer(tokenizer, [], false);
    expect(ids.map((id) => skip.push(id)).join('')).toBe('Hi');
    expect(ids.map((id) => keep.push(id)).join('')).toBe('Hi<|im_end|>');
  });

  it('agrees with a one-shot decode over a long generation', () => {
    const text = 'The quick brown fox — jumps over the lazy dog. Ünïcödé and 中文 and emoji 🎉🎉. '.repeat(20);
    const ids = tokenizer.encode(text, { addSpecialTokens: false });
    const detok = new RequestDetokenizer(tokenizer, []);
    let out = '';
    for (const id of ids) out += detok.push(id).text;
    out += detok.finish();
    expect(out).toBe(text);
    expect(detok.text).toBe(text);
  });
});

describe('UTF-8 through the API', () => {
  it('streams whole characters only, and the same text as the single response', async () => {
    const { app } = makeServer({ script: answer(tokenizer, 'né 😀!') });
    const res = await post(app, '/v1/completions', { prompt: 'Hi', max_tokens: 50, stream: true });
    const pieces = sseEvents<CompletionChunk>(res.body).map((c) => c.choices[0].text);
    expect(pieces.join('')).toBe('né 😀!');
    expect(pieces.every((p) => !p.includes('\uFFFD') && wellFormed(p))).toBe(true);
    expect(pieces).toContain('😀');
  });
});
