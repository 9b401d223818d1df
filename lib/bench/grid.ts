// Runs one round of one engine side's grid: a warm-up at every concurrency, then every mix × load point,
// each cell's requests drawn from the seed so both engine sides see the very same prompts.
import { hashString, Rng } from '../synth/rng.js';
import { cellReport, type CellReport, type EngineSide } from './cell.js';
import { drawLength } from './lengths.js';
import { describeLoad, runLoad, type LoadRun, type LoadShape } from './load.js';
import { modelPicker, needsAdapters, type MixName } from './mix.js';
import { defaultRequests, type BenchOptions } from './options.js';
import { randomPromptIds } from './prompts.js';
import { streamCompletion } from './request.js';
import { formatMs } from './table.js';

/** Where progress goes: `status` replaces a live line, `log` adds a permanent one. */
export interface BenchUi {
  status(line: string): void;
  log(line: string): void;
}

/** One engine side to measure: where it listens and its base model's name. */
export interface Side {
  engine: EngineSide;
  url: string;
  base: string;
  apiKey?: string;
}

export interface Grid {
  opts: BenchOptions;
  loads: readonly LoadShape[];
  adapters: readonly string[];
  /** Prompt token ids are drawn below this. */
  idLimit: number;
  ui: BenchUi;
}

/** A generation that runs longer than this is a hung server, not a data point. */
const REQUEST_TIMEOUT_MS = 10 * 60 * 1000;
const STATUS_INTERVAL_MS = 250;

export class BenchError extends Error {
  override readonly name = 'BenchError';
}

/** One round of one cell: the requests of a mix at a load point. */
export interface CellRun {
  mix: MixName;
  load: LoadShape;
  run: LoadRun;
}

export async function runRound(grid: Grid, side: Side, mixes: readonly MixName[], round: number): Promise<CellRun[]> {
  await warmUp(grid, side, mixes.some(needsAdapters) ? grid.adapters[0] : undefined);
  const runs: CellRun[] = [];
  for (const mix of mixes) {
    for (const load of grid.loads) runs.push({ mix, load, run: await runCell(grid, side, mix, load, round) });
  }
  return runs;
}

/** An engine side's cells, mix by mix and load point by load point, each over its rounds' runs. */
export function cellsOf(engine: EngineSide, mixes: readonly MixName[], loads: readonly LoadShape[], runs: readonly CellRun[]): CellReport[] {
  return mixes.flatMap((mix) => loads.map((load) => cellReport(engine, mix, load,
    runs.filter((r) => r.mix === mix && describeLoad(r.load) === describeLoad(load)).map((r) => r.run))));
}

async function runCell(grid: Grid, side: Side, mix: MixName, load: LoadShape, round: number): Promise<LoadRun> {
  const { opts, ui } = grid;
  const pick = modelPicker(mix, side.base, grid.adapters, opts.seed);
  const limit = opts.durationS !== undefined ? { durationS: opts.durationS } : { requests: opts.requests ?? defaultRequests(load) };
  const label = `${side.engine} ${mix} ${describeLoad(load)}${opts.rounds > 1 ? ` round ${round}/${opts.rounds}` : ''}`;
  let done = 0, failed = 0, tokens = 0;
  const started = Date.now();
  const show = (): void => {
    const s = (Date.now() - started) / 1000;
    const total = limit.requests !== undefined ? `/${limit.requests}` : '';
    ui.status(`${label}  ${done}${total} req  ${failed} failed  ${s > 0 ? (tokens / s).toFixed(0) : 0} tok/s  ${s.toFixed(1)} s`);
  };
  const timer = setInterval(show, STATUS_INTERVAL_MS);
  let run: LoadRun;
  try {
    run = await runLoad(load, limit, (i) => {
      const { promptIds, maxTokens } = requestOf(opts, grid.idLimit, mix, load, round, i);
      return streamCompletion({
        url: side.url, model: pick(i), promptIds, maxTokens, apiKey: side.apiKey, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      });
    }, opts.seed ^ hashString(`${describeLoad(load)}/${round}`), (r) => {
      done++;
      if (!r.ok) failed++;
      else tokens += r.outputTokens;
      show();
    });
  } finally {
    clearInterval(timer);
  }
  const cell = cellReport(side.engine, mix, load, [run]);
  ui.log(`${label}: ${cell.outputTokS.toFixed(1)} tok/s, TTFT p50 ${formatMs(cell.ttftMs.p50)} ms, ` +
    `ITL p50 ${formatMs(cell.itlMs.p50)} ms, ${cell.failed} failed${cell.errors.length > 0 ? ` (${cell.errors[0]})` : ''}`);
  return run;
}

/**
 * Request i of a cell, drawn from the seed. Its lengths are keyed without the engine side and
 * the mix, so every cell of a load point and round, the LoRA-off baseline included, has the
 * same work; its token ids are keyed by the mix too, so a later cell on the same server
 * cannot hit the prefix cache an earlier one filled.
 */
export function requestOf(
  opts: BenchOptions, idLimit: number, mix: MixName, load: LoadShape, round: number, i: number,
): { promptIds: number[]; maxTokens: number } {
  const lengths = new Rng(opts.seed, hashString(`${describeLoad(load)}/${round}/${i}`));
  const promptLen = drawLength(opts.promptLen, lengths), maxTokens = drawLength(opts.outputLen, lengths);
  const ids = new Rng(opts.seed, hashString(`${mix}/${describeLoad(load)}/${round}/${i}`));
  return { promptIds: randomPromptIds(ids, promptLen, idLimit), maxTokens };
}

/**
 * Before measuring: for each model the grid names first and each closed-loop concurrency,
 * that many concurrent short requests with the grid's prompt length. Start-up costs (first
 * launch, first adapter load, GEMM heuristics per prefill shape, a CUDA graph capture per
 * decode batch size) then stay out of the cells.
 */
async function warmUp(grid: Grid, side: Side, adapter: string | undefined): Promise<void> {
  const widths = [...new Set([1, ...grid.loads.flatMap((l) => (l.kind === 'closed' ? [l.concurrency] : []))])];
  const rng = new Rng(0xbeef);
  for (const model of adapter === undefined ? [side.base] : [side.base, adapter]) {
    for (const width of widths) {
      grid.ui.status(`${side.engine}: warm-up, ${width} request${width > 1 ? 's' : ''} on ${model}`);
      const results = await Promise.all(Array.from({ length: width }, () => streamCompletion({
        url: side.url, model, promptIds: randomPromptIds(rng, drawLength(grid.opts.promptLen, rng), grid.idLimit), maxTokens: 4,
        apiKey: side.apiKey, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      })));
      const bad = results.find((r) => !r.ok);
      if (bad) throw new BenchError(`warm-up request to ${side.url} (model ${model}) failed: ${bad.error}`);
    }
  }
}
