// A byte-level BPE tokenizer with exactly vocab_size tokens: the 256 byte tokens (ids 0..255),
// synthetic merges that build unique strings up to vocab_size - 3, and three ChatML special
// tokens at the top of the vocabulary. Any text encodes (bytes always do) and decodes back,
// so servers, chat templates and benchmarks work on a synthetic checkpoint as on a real one.

import { SynthError } from './errors.js';

export const SPECIAL_TOKENS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>'] as const;

/** Qwen's ChatML template, without tools or thinking. */
export const CHATML_TEMPLATE =
  "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{%- endfor %}" +
  "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

export interface SynthTokenizer {
  tokenizerJson: Record<string, unknown>;
  tokenizerConfig: Record<string, unknown>;
  /** <|endoftext|>: written as bos_token_id (as Qwen3's config does) and used as padding. */
  bosTokenId: number;
  /** <|im_end|>: ends a ChatML turn. */
  eosTokenId: number;
}

/** GPT-2's map from bytes to printable characters, which byte-level BPE vocabularies are written in. */
export function bytesToUnicode(): string[] {
  const direct = (b: number): boolean => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  const out: string[] = [];
  let extra = 0;
  for (let b = 0; b < 256; b++) out.push(String.fromCodePoint(direct(b) ? b : 256 + extra++));
  return out;
}

/** Characters merges are built from, commonest first so ordinary English text compresses a little. */
function mergeAlphabet(byteChars: readonly string[]): string[] {
  const text = ' etaoinshrdlcumwfgypbvkjxqzETAOINSHRDLCUMWFGYPBVKJXQZ0123456789.,;:!?\'"-()\n';
  return [...text].map((ch) => byteChars[ch.charCodeAt(0)]);
}

/**
 * `count` merges, each joining an existing token with one more alphabet character: all 2-character
 * tokens first, then 3-character ones, and so on. Every merge's left side exists before it, and
 * every produced string is new, so the vocabulary has no duplicates.
 */
function syntheticMerges(alphabet: readonly string[], count: number): [string, string][] {
  const merges: [string, string][] = [];
  let level: string[] = [...alphabet];
  while (merges.length < count) {
    const next: string[] = [];
    for (const left of level) {
      for (const ch of alphabet) {
        if (merges.length === count) return merges;
        merges.push([left, ch]);
        next.push(left + ch);
      }
    }
    level = next;
  }
  return merges;
}

export function synthTokenizer(vocabSize: number, maxLength: number): SynthTokenizer {
  const minimum = 256 + SPECIAL_TOKENS.length;
  if (!Number.isSafeInteger(vocabSize) || vocabSize < minimum) {
    throw new SynthError(`vocab_size ${vocabSize} is too small for a byte-level tokenizer (at least ${minimum})`);
  }
  const byteChars = bytesToUnicode();
  const vocab: Record<string, number> = {};
  byteChars.forEach((ch, id) => (vocab[ch] = id));
  const merges = syntheticMerges(mergeAlphabet(byteChars), vocabSize - minimum);
  let next = 256;
  for (const [a, b] of merges) vocab[a + b] = next++;

  const firstSpecial = vocabSize - SPECIAL_TOKENS.length;
  const addedTokens = SPECIAL_TOKENS.map((content, i) => ({
    id: firstSpecial + i, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
  }));
  const byteLevel = (addPrefixSpace: boolean, trimOffsets: boolean, useRegex: boolean) =>
    ({ type: 'ByteLevel', add_prefix_space: addPrefixSpace, trim_offsets: trimOffsets, use_regex: useRegex });
  const tokenizerJson = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: addedTokens,
    normalizer: null,
    pre_tokenizer: byteLevel(false, true, true),
    post_processor: byteLevel(false, false, false),
    decoder: byteLevel(true, true, true),
    model: {
      type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges,
    },
  };
  const [endOfText, , imEnd] = SPECIAL_TOKENS;
  const tokenizerConfig = {
    tokenizer_class: 'PreTrainedTokenizerFast',
    added_tokens_decoder: Object.fromEntries(addedTokens.map(({ id, ...t }) => [String(id), t])),
    additional_special_tokens: ['<|im_start|>', '<|im_end|>'],
    bos_token: null,
    eos_token: imEnd,
    pad_token: endOfText,
    unk_token: null,
    clean_up_tokenization_spaces: false,
    split_special_tokens: false,
    model_max_length: maxLength,
    chat_template: CHATML_TEMPLATE,
  };
  return { tokenizerJson, tokenizerConfig, bosTokenId: firstSpecial, eosTokenId: firstSpecial + 2 };
}
