// Tensor jobs (tensor_job.ts) spread over worker threads, largest first: drawing random bf16
// weights is CPU-bound (~0.45 GB/s a thread), so an 8B checkpoint's 16 GB take a core each
// for a share of the tensors, and the disk sets the pace.
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';

import { packageRoot } from '../addon/loader.js';
import type { TensorJob } from './tensor_job.js';
import type { FromTensorWorker } from './tensor_worker.js';

/** Threads by default: one a core, at most 8 (beyond, the disk is the limit). */
export function defaultThreads(): number {
  return Math.max(1, Math.min(8, availableParallelism()));
}

/** Runs every job; `onBytes` as chunks land. Rejects on the first failure, the other threads stopped. */
export async function runTensorJobs(jobs: readonly TensorJob[], onBytes: (n: number) => void, threads = defaultThreads()): Promise<void> {
  if (!Number.isInteger(threads) || threads < 1) throw new Error(`synth threads: a positive integer, got ${threads}`);
  const queue = [...jobs].sort((a, b) => b.elements - a.elements);
  if (queue.length === 0) return;
  const count = Math.min(threads, queue.length);
  // Compiled code, like the engine's worker: a thread cannot load TypeScript sources.
  const script = join(packageRoot(), 'dist', 'lib', 'synth', 'tensor_worker.js');
  const workers = Array.from({ length: count }, () => new Worker(script));
  try {
    await Promise.all(workers.map((w) => new Promise<void>((resolve, reject) => {
      const next = (): void => {
        const job = queue.shift();
        if (job === undefined) resolve();
        else w.postMessage(job);
      };
      w.on('message', (m: FromTensorWorker) => {
        if (m.type === 'bytes') onBytes(m.n);
        else if (m.type === 'done') next();
        else reject(new Error(m.message));
      });
      w.on('error', reject);
      w.on('exit', (code) => reject(new Error(`a synth worker thread exited (code ${code})`)));
      next();
    })));
  } finally {
    await Promise.all(workers.map((w) => w.terminate()));
  }
}
