// A tensor's bf16 bytes produced 1 MiB at a time for the safetensors writer, so a tensor of any
// size costs two chunks of memory: the next chunk is drawn while the last one is being written
// (the writer takes one chunk at a time and reads it until its promise settles).
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
    const buffers = [0, 1].map(() => new Uint16Array(chunkElements + (chunkElements & 1)));
    if (init.kind === 'constant') for (const b of buffers) b.fill(toBf16Bits(init.value));
    const table = init.kind === 'normal' ? gaussianBf16Table(init.std) : null;
    let writing = Promise.resolve();
    for (let done = 0, k = 0; done < elements; k ^= 1) {
      const n = Math.min(chunkElements, elements - done);
      if (table !== null) rng.fillFromTable(buffers[k], table);
      await writing;
      writing = write(new Uint8Array(buffers[k].buffer, 0, n * 2));
      done += n;
    }
    await writing;
  };
}
