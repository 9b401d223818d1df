// Prompts as random token ids: every request gets its own (so no prefix cache hit flatters a
// result), the same seed gives the same prompts, and no tokenizer is needed on the client.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import type { Rng } from '../synth/rng.js';

export function randomPromptIds(rng: Rng, length: number, idLimit: number): number[] {
  return Array.from({ length }, () => rng.int(0, idLimit));
}

/**
 * Ids below this are ordinary tokens of the checkpoint: its vocab_size, lowered to the first
 * added (special) token when those sit at the top of the vocabulary, as in Qwen, Llama 3 and
 * mstar synth's tokenizers. vLLM refuses prompt ids beyond the tokenizer's own vocabulary.
 */
export function promptIdLimit(modelDir: string, vocabSize: number): number {
  const file = join(modelDir, 'tokenizer.json');
  if (!existsSync(file)) return vocabSize;
  const json = JSON.parse(readFileSync(file, 'utf8')) as { added_tokens?: { id?: unknown }[] };
  const top = (json.added_tokens ?? []).map((t) => t.id).filter((id): id is number => typeof id === 'number' && id >= 256);
  return Math.min(vocabSize, ...top);
}
