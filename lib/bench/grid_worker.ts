// The load generator's own thread. In `--serve` mode the server's HTTP work runs on the main
// thread; sending requests and parsing streams there too would slow the server under test and
// bunch stream chunks together, so the client side of the benchmark runs here.
import { parentPort, workerData } from 'node:worker_threads';

import { BenchError, runRound } from './grid.js';
import type { GridJob, FromGridWorker } from './grid_thread.js';

const port = parentPort!;
const send = (m: FromGridWorker): void => port.postMessage(m);
const job = workerData as GridJob;

const ui = { status: (line: string) => send({ type: 'status', line }), log: (line: string) => send({ type: 'log', line }) };
runRound({ ...job.grid, ui }, job.side, job.mixes, job.round).then(
  (runs) => send({ type: 'done', runs }),
  (e: unknown) => send({ type: 'error', message: e instanceof Error ? e.message : String(e), bench: e instanceof BenchError }),
);
