// /v1/completions `prompt` → token ids: a string, an array of token ids, or a one-element
// array of either (what OpenAI clients send for a single prompt).
import type { Tokenizer } from '../tokenizer/tokenizer.js';
import { invalidRequest } from './errors.js';

export function completionPromptIds(
  prompt: unknown,
  tokenizer: Pick<Tokenizer, 'encode'>,
  vocabSize: number,
  addSpecialTokens: boolean,
): number[] {
  if (prompt === undefined || prompt === null) throw invalidRequest('`prompt` is required.', 'prompt');
  let value = prompt;
  if (Array.isArray(value) && value.length === 1 && (typeof value[0] === 'string' || Array.isArray(value[0]))) {
    value = value[0];
  }
  if (typeof value === 'string') {
    if (value.length === 0) throw invalidRequest('`prompt` must not be empty.', 'prompt');
    const ids = tokenizer.encode(value, { addSpecialTokens });
    if (ids.length === 0) throw invalidRequest('`prompt` encodes to no tokens.', 'prompt');
    return ids;
  }
  if (!Array.isArray(value)) throw invalidRequest('`prompt` must be a string or an array of token ids.', 'prompt');
  if (value.length === 0) throw invalidRequest('`prompt` must not be empty.', 'prompt');
  if (value.every((p) => typeof p === 'string' || Array.isArray(p))) {
    throw invalidRequest('Only one prompt per request is supported; send several requests instead.', 'prompt');
  }
  for (const id of value) {
    if (typeof id !== 'number' || !Number.isInteger(id) || id < 0 || id >= vocabSize) {
      throw invalidRequest(`\`prompt\` token ids must be integers between 0 and ${vocabSize - 1}, got ${JSON.stringify(id)}.`, 'prompt');
    }
  }
  return value as number[];
}
