// One synthetic tensor's bytes written in place: drawn from the tensor's own stream (seed, its
// name's hash) and written at its offset in a file already sized for it. The bytes do not depend
// on which thread writes them or when (tensor_threads.ts runs these jobs on worker threads).
import { open } from 'node:fs/promises';

import { bf16Chunks, type Init } from './bf16_chunks.js';
import { hashString, Rng } from './rng.js';

export interface TensorJob {
  file: string;
  /** Byte offset of the tensor's first element in `file`. */
  offset: number;
  name: string;
  elements: number;
  init: Init;
  seed: number;
}

/** Runs a job; `onBytes` after each chunk written. */
export async function runTensorJob(job: TensorJob, onBytes: (n: number) => void): Promise<void> {
  const fh = await open(job.file, 'r+');
  try {
    let at = job.offset;
    // Asynchronous writes: the next chunk is drawn while this one is written (bf16Chunks).
    await bf16Chunks(job.elements, job.init, new Rng(job.seed, hashString(job.name)))(async (chunk) => {
      const position = at;
      at += chunk.byteLength;
      for (let done = 0; done < chunk.byteLength;) {
        done += (await fh.write(chunk, done, chunk.byteLength - done, position + done)).bytesWritten;
      }
      onBytes(chunk.byteLength);
    });
  } finally {
    await fh.close();
  }
}
