import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { describe, expect, it } from 'vitest';

import { ChatTemplate, ChatTemplateError, loadChatTemplate } from '../../lib/tokenizer/chat_template.js';
import { Tokenizer } from '../../lib/tokenizer/tokenizer.js';
import { TINY_QWEN3, tinyTokenizer } from './helpers.js';

const tokenizerJson = JSON.parse(readFileSync(join(TINY_QWEN3, 'tokenizer.json'), 'utf8')) as Record<string, unknown>;
const qwen3Template = readFileSync(new URL('./fixtures/qwen3_chat_template.jinja', import.meta.url), 'utf8');
const noTokens = { bosToken: null, eosToken: null };

describe('Tokenizer', () => {
  it('loads the tiny Qwen3 checkpoint: EOS from the config, no BOS, ChatML template', () => {
    const t = tinyTokenizer();
    expect(t.eosToken).toBe('<|im_end|>');
    expect(t.eosTokenIds).toEqual([2]);
    expect(t.bosTokenId).toBeNull();
    expect(t.vocabSize).toBe(512);
    expect(t.chatTemplate).not.toBeNull();
    const ids = t.encode('Hello world');
    expect(t.decode(ids)).toBe('Hello world');
    expect(t.isSpecial(2)).toBe(true);
    expect(t.tokenText(2)).toBe('<|im_end|>');
  });

  it('collects every EOS id: the tokenizer\'s, then generation_config\'s list', () => {
    const t = new Tokenizer({ tokenizerJson, tokenizerConfig: { eos_token: { content: '<|im_end|>' } }, generationConfig: { eos_token_id: [0, 2] } });
    expect(t.eosTokenIds).toEqual([2, 0]);
    const fromModel = new Tokenizer({ tokenizerJson, modelConfig: { eos_token_id: 0, bos_token_id: 1 } });
    expect(fromModel.eosTokenIds).toEqual([0]);
    expect(fromModel.eosToken).toBe('<|endoftext|>');
    expect(fromModel.bosToken).toBe('<|im_start|>');
  });

  it('adds BOS only when add_bos_token says so, and never for chat prompts', () => {
    const t = new Tokenizer({ tokenizerJson, tokenizerConfig: { bos_token: '<|endoftext|>', add_bos_token: true } });
    expect(t.bosTokenId).toBe(0);
    const plain = tinyTokenizer().encode('Hi');
    expect(t.encode('Hi')).toEqual([0, ...plain]);
    expect(t.encode('Hi', { addSpecialTokens: false })).toEqual(plain);
    const off = new Tokenizer({ tokenizerJson, tokenizerConfig: { bos_token: '<|endoftext|>', add_bos_token: false } });
    expect(off.encode('Hi')).toEqual(plain);
  });

  it('lets a Llama 3 style post-processor add BOS to completion prompts only', () => {
    const bos = { SpecialToken: { id: '<|endoftext|>', type_id: 0 } };
    const seq = { Sequence: { id: 'A', type_id: 0 } };
    const postProcessor = {
      type: 'TemplateProcessing', single: [bos, seq], pair: [bos, seq, bos, { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens: { '<|endoftext|>': { id: '<|endoftext|>', ids: [0], tokens: ['<|endoftext|>'] } },
    };
    const t = new Tokenizer({ tokenizerJson: { ...tokenizerJson, post_processor: postProcessor }, tokenizerConfig: { bos_token: '<|endoftext|>' } });
    const plain = tinyTokenizer().encode('Hi');
    expect(t.encode('Hi')).toEqual([0, ...plain]);
    expect(t.encode('Hi', { addSpecialTokens: false })).toEqual(plain);
  });

  it('decodes unknown ids to nothing instead of throwing', () => {
    expect(tinyTokenizer().decode([100000])).toBe('');
    expect(tinyTokenizer().decode([])).toBe('');
  });
});

describe('chat templates', () => {
  const messages = [{ role: 'user', content: 'Hi' }];
  const opts = { addGenerationPrompt: true, ...noTokens };

  it('picks the "default" template from a list', () => {
    const t = loadChatTemplate(null, { chat_template: [{ name: 'tool_use', template: 'A' }, { name: 'default', template: 'B' }] });
    expect(t?.render(messages, opts)).toBe('B');
    expect(loadChatTemplate(null, { chat_template: [{ name: 'rag', template: 'C' }] })?.render(messages, opts)).toBe('C');
    expect(loadChatTemplate(null, {})).toBeNull();
  });

  it('prefers chat_template.jinja over tokenizer_config.json', () => {
    const dir = mkdtempSync(join(tmpdir(), 'mstar-tok-'));
    for (const f of ['tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(TINY_QWEN3, f), join(dir, f));
    writeFileSync(join(dir, 'chat_template.jinja'), 'file:{{ messages[0].content }}');
    expect(Tokenizer.load(dir).chatTemplate?.render(messages, opts)).toBe('file:Hi');
  });

  it('passes bos_token and eos_token', () => {
    const t = new ChatTemplate('{{ bos_token }}{{ messages[0].content }}{{ eos_token }}');
    expect(t.render(messages, { addGenerationPrompt: true, bosToken: '<s>', eosToken: '</s>' })).toBe('<s>Hi</s>');
  });

  it('renders the real Qwen3 template, with enable_thinking from chat_template_kwargs', () => {
    const t = new ChatTemplate(qwen3Template);
    const history = [
      { role: 'system', content: 'S' },
      { role: 'user', content: 'Q1' },
      { role: 'assistant', content: '<think>\nhmm\n</think>\n\nA1' },
      { role: 'user', content: 'Q2' },
    ];
    expect(t.render(history, opts)).toBe(
      '<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n' +
        '<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n',
    );
    expect(t.render(messages, { ...opts, extra: { enable_thinking: false } })).toBe(
      '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n',
    );
  });

  it('reports a template that does not parse or raises as a ChatTemplateError', () => {
    expect(() => new ChatTemplate('{% if %}').render(messages, opts)).toThrow(ChatTemplateError);
    expect(() => new ChatTemplate("{{ raise_exception('no') }}").render(messages, opts)).toThrow(/no/);
  });
});
