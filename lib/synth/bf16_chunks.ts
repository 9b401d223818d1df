// A tensor's bf16 bytes produced 1 MiB at a time for the safetensors writer, so a tensor of any
// size costs one chunk of memory. The writer awaits each chunk before asking for the next, so one
// buffer is reused for the whole tensor.
import type { ChunkWriter } from '../checkpoint/safetensors_writer.js';
import { toBf16Bits } from './bf16.js';
import { gaussianBf16Table } from './gaussian_table.js';
import type { Rng } from './rng.js';

/** How a synthetic tensor is filled. */
export type Init = { kind: 'normal'; std: number } | { kind: 'constant'; value: number };

export const CHUNK_BYTES = 1 << 20;

/** Produces `elements` bf16 values drawn per `init`; `rng` is only read for 'normal'. */
export function bf16Chunks(elements: number, init: Init, rng: Rng): (write: ChunkWriter) => Promise<void> {
  return async (write) => {
    const chunkElements = Math.min(CHUNK_BYTES / 2, elements);
    const buffer = new Uint16Array(chunkElements + (chunkElements & 1));
    const bytes = new Uint8Array(buffer.buffer);
    if (init.kind === 'constant') buffer.fill(toBf16Bits(init.value));
    const table = init.kind === 'normal' ? gaussianBf16Table(init.std) : null;
    const words = table === null ? null : new Uint32Array(buffer.length / 2);
    for (let done = 0; done < elements;) {
      const n = Math.min(chunkElements, elements - done);
      if (table !== null && words !== null) fillNormal(buffer, words, table, rng);
      await write(bytes.subarray(0, n * 2));
      done += n;
    }
  };
}

/** Two bf16 values per 32 random bits, each half indexing the quantile table. */
function fillNormal(out: Uint16Array, words: Uint32Array, table: Uint16Array, rng: Rng): void {
  rng.fill(words);
  for (let j = 0, i = 0; j < words.length; j++, i += 2) {
    const r = words[j];
    out[i] = table[r & 0xffff];
    out[i + 1] = table[r >>> 16];
  }
}
