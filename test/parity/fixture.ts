// Reads the Hugging Face reference fixtures made by make_fixtures.py.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), '..', 'fixtures');

export interface ParityCase {
  prompt: string;
  promptIds: number[];
  outputIds: number[];
  /** Per step: the reference's top-k [tokenId, logprob] pairs. */
  topLogprobs: [number, number][][];
  /** Per step: the reference's full logits. */
  logits: Float32Array[];
}

export interface ParityFixture {
  model: string;
  modelDir: string;
  topK: number;
  cases: ParityCase[];
}

interface RawFixture {
  model: string;
  top_k: number;
  cases: { prompt: string; prompt_ids: number[]; output_ids: number[]; top_logprobs: [number, number][][]; logits_f32_base64: string[] }[];
}

export function readParityFixture(name: string): ParityFixture {
  const raw = JSON.parse(readFileSync(join(FIXTURES, 'parity', `${name}.json`), 'utf8')) as RawFixture;
  return {
    model: raw.model,
    modelDir: join(FIXTURES, 'models', raw.model),
    topK: raw.top_k,
    cases: raw.cases.map((c) => ({
      prompt: c.prompt,
      promptIds: c.prompt_ids,
      outputIds: c.output_ids,
      topLogprobs: c.top_logprobs,
      logits: c.logits_f32_base64.map((b) => {
        const bytes = Buffer.from(b, 'base64');
        return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
      }),
    })),
  };
}
