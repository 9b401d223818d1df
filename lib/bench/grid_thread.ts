// Runs one round of one engine side's grid on the load generator's thread (grid_worker.ts) and
// relays its progress to the caller's UI.
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';

import { packageRoot } from '../addon/loader.js';
import { BenchError, type CellRun, type Grid, type Side } from './grid.js';
import type { MixName } from './mix.js';

export interface GridJob {
  grid: Omit<Grid, 'ui'>;
  side: Side;
  mixes: MixName[];
  round: number;
}

export type FromGridWorker =
  | { type: 'status'; line: string }
  | { type: 'log'; line: string }
  | { type: 'done'; runs: CellRun[] }
  | { type: 'error'; message: string; bench: boolean };

export function runRoundOnThread(grid: Grid, side: Side, mixes: readonly MixName[], round: number): Promise<CellRun[]> {
  const { ui, ...plain } = grid;
  const job: GridJob = { grid: plain, side, mixes: [...mixes], round };
  // Compiled code, like the engine's worker: a thread cannot load TypeScript sources.
  const worker = new Worker(join(packageRoot(), 'dist', 'lib', 'bench', 'grid_worker.js'), { workerData: job });
  return new Promise((resolve, reject) => {
    let settled = false;
    worker.on('message', (m: FromGridWorker) => {
      if (m.type === 'status') ui.status(m.line);
      else if (m.type === 'log') ui.log(m.line);
      else {
        settled = true;
        void worker.terminate();
        if (m.type === 'done') resolve(m.runs);
        else reject(m.bench ? new BenchError(m.message) : new Error(m.message));
      }
    });
    worker.on('error', (e) => {
      settled = true;
      reject(e);
    });
    worker.on('exit', (code) => {
      if (!settled) reject(new Error(`the benchmark client thread exited (code ${code})`));
    });
  });
}
