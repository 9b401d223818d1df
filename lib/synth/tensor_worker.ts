// A worker thread of tensor_threads.ts: runs the tensor jobs it is sent, one at a time.
import { parentPort } from 'node:worker_threads';

import { runTensorJob, type TensorJob } from './tensor_job.js';

export type ToTensorWorker = TensorJob;
export type FromTensorWorker = { type: 'bytes'; n: number } | { type: 'done' } | { type: 'error'; message: string };

const port = parentPort!;
port.on('message', (job: ToTensorWorker) => {
  const post = (m: FromTensorWorker): void => port.postMessage(m);
  runTensorJob(job, (n) => post({ type: 'bytes', n })).then(
    () => post({ type: 'done' }),
    (e: unknown) => post({ type: 'error', message: `${job.file}, tensor ${job.name}: ${e instanceof Error ? e.message : String(e)}` }));
});
