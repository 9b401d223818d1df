// `mstar bench` end to end: resolves what to measure, runs the grid on the engine under test
// and on the LoRA-off baseline at the same load points, round by round, and puts retention
// (and, on request, the c=1 roofline and the long-prefill cell) into one report.
import { readModelConfig } from '../checkpoint/config.js';
import type { ServeConfig } from '../config/schema.js';
import { withRetention, type CellReport, type EngineSide } from './cell.js';
import { listModels } from './endpoint.js';
import { BenchError, cellsOf, type BenchUi, type CellRun, type Grid, type Side } from './grid.js';
import { runRoundOnThread } from './grid_thread.js';
import { formatLength, meanLength } from './lengths.js';
import type { LoadShape } from './load.js';
import { loadBenchConfig, startLocalServer, withoutLora } from './local_server.js';
import { needsAdapters, type MixName } from './mix.js';
import type { BenchOptions, BenchReport, EngineCounters } from './options.js';
import { promptIdLimit } from './prompts.js';
import { prefillFlops, prefillReport } from './prefill.js';
import { hbmBandwidth, type HbmBandwidth } from './hbm.js';
import { adapterBytes, modelBytes, roofline } from './roofline.js';

export { BenchError, type BenchUi } from './grid.js';

export async function runBenchmark(opts: BenchOptions, ui: BenchUi): Promise<BenchReport> {
  const startedAt = new Date().toISOString();
  const target = opts.target;
  if (opts.roofline && target.kind !== 'serve') throw new BenchError('--roofline needs --serve (it reads the checkpoint to count weight bytes)');
  if (opts.prefill !== undefined && target.kind !== 'serve') throw new BenchError('--prefill needs --serve (it reads the checkpoint to count FLOPs)');
  const loads = loadPoints(opts, ui);

  // What to ask for: the base model's name, the adapters, and the range of prompt token ids.
  let serveConfig: ServeConfig | undefined;
  let model: string, adapters: string[], idLimit: number;
  if (target.kind === 'serve') {
    serveConfig = loadBenchConfig(target.configFile);
    model = serveConfig.served_model_name;
    adapters = opts.adapters ?? serveConfig.resources.lora?.adapters.map((a) => a.name) ?? [];
    idLimit = promptIdLimit(serveConfig.model, readModelConfig(serveConfig.model).vocabSize);
  } else {
    const listed = target.model !== undefined && opts.adapters !== undefined ? undefined : await listModels(target.url, target.apiKey);
    const base = target.model ?? listed?.base;
    if (base === undefined) throw new BenchError(`${target.url}/v1/models lists no base model: pass --model NAME`);
    model = base;
    adapters = opts.adapters ?? listed?.adapters ?? [];
    idLimit = target.vocab;
  }

  const mixes = opts.mixes.filter((m) => {
    if (needsAdapters(m) && adapters.length === 0) ui.log(`mix ${m}: skipped, no adapters (give --adapters or serve some)`);
    return !needsAdapters(m) || adapters.length > 0;
  });
  if (mixes.length === 0) throw new BenchError('no mix to run');
  const slots = serveConfig?.resources.lora?.slots;
  if (slots !== undefined && mixes.includes('churn') && adapters.length <= slots) {
    ui.log(`mix churn: ${adapters.length} adapters fit the ${slots} slots, so nothing is swapped (synthesize more adapters to churn)`);
  }

  // Measured before any server starts: the GPU is idle, and the buffer is freed before an
  // engine sizes its KV cache.
  const hbm = opts.roofline && serveConfig !== undefined ? await hbmBandwidth(opts.hbmGbps, serveConfig.device, ui.log) : undefined;
  const grid: Grid = { opts, loads, adapters, idLimit, ui };
  const runs: Record<EngineSide, CellRun[]> = { 'lora-on': [], 'lora-off': [] };
  const prefillRuns: Record<EngineSide, CellRun[]> = { 'lora-on': [], 'lora-off': [] };
  const counters = new Map<EngineSide, EngineCounters>();
  const urls = new Map<EngineSide, string>();
  // Each side measured once a round: its grid (and in the first round, with --prefill, its
  // long-prompt cell), on a server of its own started for the round where --serve.
  const sides: Array<(round: number) => Promise<void>> = [];
  const long = opts.prefill === undefined || serveConfig === undefined ? undefined : prefillGrid(grid, opts.prefill, serveConfig);
  const onSide = (side: Side, m: readonly MixName[]) => async (round: number) => {
    runs[side.engine].push(...await runRoundOnThread(grid, side, m, round));
    // The long prompt on the base model, and where the side's mixes name adapters, on one too.
    const longMixes: MixName[] = m.some(needsAdapters) ? ['base', 'one'] : ['base'];
    if (long && round === 1) prefillRuns[side.engine].push(...await runRoundOnThread(long, side, longMixes, 1));
  };
  if (serveConfig !== undefined) {
    // The engine under test and its LoRA-off twin: one at a time, so neither slows the other.
    for (const [engine, config, m] of [['lora-on', serveConfig, mixes], ['lora-off', withoutLora(serveConfig), ['base']]] as const) {
      sides.push(async (round) => {
        const { url, counters: c } = await onLocalServer(engine, config, ui, (side) => onSide(side, m)(round));
        if (!urls.has(engine)) urls.set(engine, url);
        counters.set(engine, addCounters(counters.get(engine), c));
      });
    }
  } else {
    const t = target as Extract<BenchOptions['target'], { kind: 'url' }>;
    urls.set('lora-on', t.url);
    sides.push(onSide({ engine: 'lora-on', url: t.url, base: model, apiKey: t.apiKey }, mixes));
    if (t.baselineUrl !== undefined) {
      const base = t.baselineModel ?? t.model ?? (await listModels(t.baselineUrl, t.apiKey)).base ?? model;
      urls.set('lora-off', t.baselineUrl);
      sides.push(onSide({ engine: 'lora-off', url: t.baselineUrl, base, apiKey: t.apiKey }, ['base']));
    }
  }
  // Rounds alternate which side goes first (on, off; off, on; ...), so that a drift over the
  // run weighs on both sides alike. (In some single-round runs on an H200, base rows with
  // LoRA on came out 5-10% faster than the LoRA-off engine measured after them, on the same
  // kernels, at every load point.)
  for (let round = 1; round <= opts.rounds; round++) {
    for (const measure of round % 2 === 1 ? sides : [...sides].reverse()) await measure(round);
  }
  const cells = cellsOf('lora-on', mixes, loads, runs['lora-on']);
  const baseline = sides.length > 1 ? cellsOf('lora-off', ['base'], loads, runs['lora-off']) : [];
  const prefill = long ? (['lora-on', 'lora-off'] as const).flatMap((e) =>
    cellsOf(e, [...new Set(prefillRuns[e].map((r) => r.mix))], long.loads, prefillRuns[e])) : [];
  const engines = counters.size > 0 ? [...counters.values()] : null;
  const url = urls.get('lora-on')!, baselineUrl = urls.get('lora-off') ?? null;
  const all = [...withRetention(cells, baseline), ...withRetention(baseline, baseline)];

  return {
    tool: 'mstar bench',
    version: 1,
    startedAt,
    target: {
      kind: target.kind, url, baselineUrl, model, adapters,
      ...(serveConfig !== undefined && target.kind === 'serve' ? { serveConfig: target.configFile, device: serveConfig.device, slots } : {}),
    },
    settings: {
      concurrency: loads.filter((l) => l.kind === 'closed').map((l) => (l as { concurrency: number }).concurrency),
      rates: opts.rates,
      promptLen: formatLength(opts.promptLen),
      outputLen: formatLength(opts.outputLen),
      requests: opts.durationS !== undefined ? null : opts.requests ?? null,
      durationS: opts.durationS ?? null,
      mixes,
      rounds: opts.rounds,
      seed: opts.seed,
    },
    cells: all,
    roofline: hbm !== undefined ? rooflineOf(all, serveConfig!, adapters, opts, hbm) : null,
    prefill: opts.prefill !== undefined && serveConfig !== undefined
      ? prefillReport(prefill, opts.prefill, prefillFlops(serveConfig, opts.prefill), opts.peakTflops)
      : null,
    engines,
  };
}

/** One closed-loop c=1 cell of 8 requests with an N-token prompt and one output token. */
function prefillGrid(grid: Grid, tokens: number, config: ServeConfig): Grid {
  const limit = config.max_seq_len ?? readModelConfig(config.model).maxPositionEmbeddings;
  if (tokens + 1 > limit) throw new BenchError(`--prefill ${tokens}: the server takes at most ${limit} tokens (max_seq_len in ${config.model}'s serve.yaml); it needs ${tokens + 1}`);
  const one = { min: 1, max: 1 };
  return {
    ...grid,
    opts: { ...grid.opts, promptLen: { min: tokens, max: tokens }, outputLen: one, requests: 8, durationS: undefined, rounds: 1 },
    loads: [{ kind: 'closed', concurrency: 1 }],
  };
}

function loadPoints(opts: BenchOptions, ui: BenchUi): LoadShape[] {
  const loads: LoadShape[] = [
    ...opts.concurrency.map((c): LoadShape => ({ kind: 'closed', concurrency: c })),
    ...opts.rates.map((r): LoadShape => ({ kind: 'poisson', rate: r })),
  ];
  if (opts.roofline && !loads.some((l) => l.kind === 'closed' && l.concurrency === 1)) {
    ui.log('--roofline measures at c=1: adding c=1 to the load points');
    loads.unshift({ kind: 'closed', concurrency: 1 });
  }
  if (loads.length === 0) throw new BenchError('no load points: give --concurrency and/or --rate');
  return loads;
}

/** An engine side's counters over its servers (one a round). */
function addCounters(a: EngineCounters | undefined, b: EngineCounters): EngineCounters {
  if (a === undefined) return b;
  const lora = a.lora && b.lora && {
    ...b.lora,  // what auto measured: the last round's
    loads: a.lora.loads + b.lora.loads, evictions: a.lora.evictions + b.lora.evictions, turns: a.lora.turns + b.lora.turns,
    loadSeconds: a.lora.loadSeconds + b.lora.loadSeconds, merges: a.lora.merges + b.lora.merges, mergedSteps: a.lora.mergedSteps + b.lora.mergedSteps,
  };
  return { engine: a.engine, steps: a.steps + b.steps, preemptions: a.preemptions + b.preemptions, ...(lora ? { lora } : {}) };
}

async function onLocalServer<T>(
  engine: EngineSide, config: ServeConfig, ui: BenchUi, run: (side: Side) => Promise<T>,
): Promise<{ url: string; out: T; counters: EngineCounters }> {
  const lora = config.resources.lora;
  ui.log(`${engine}: starting mstar on ${config.model} (device ${config.device}${lora ? `, ${lora.adapters.length} adapters, ${lora.slots} slots` : ', LoRA off'})`);
  const server = await startLocalServer(config, (m) => ui.status(`${engine}: ${m}`));
  try {
    const out = await run({ engine, url: server.url, base: config.served_model_name });
    const { steps, preemptions, lora } = server.stats();
    const pool = lora && {
      loads: lora.loads, evictions: lora.evictions, turns: lora.turns, loadSeconds: lora.loadSeconds, merges: lora.merges, mergedSteps: lora.mergedSteps,
      ...(lora.mergeMs !== undefined && { mergeMs: lora.mergeMs }), ...(lora.stepOverheadMs && { stepOverheadMs: lora.stepOverheadMs }),
    };
    return { url: server.url, out, counters: { engine, steps, preemptions, ...(pool ? { lora: pool } : {}) } };
  } finally {
    await server.close();
  }
}

function rooflineOf(
  cells: CellReport[], config: ServeConfig, adapters: readonly string[], opts: BenchOptions, hbm: HbmBandwidth,
): BenchReport['roofline'] {
  const pathOf = (name: string): string | undefined => config.resources.lora?.adapters.find((a) => a.name === name)?.path;
  const sizes = adapters.map((a) => (pathOf(a) === undefined ? 0 : adapterBytes(pathOf(a)!)));
  // 'one' reads its adapter every step; churn and mixed read one adapter per row, on average this size.
  const adapterBytesOf = (mix: MixName): number =>
    mix === 'base' || sizes.length === 0 ? 0 : mix === 'one' ? sizes[0] : sizes.reduce((a, b) => a + b, 0) / sizes.length;
  // Decode step k (k = 1 .. out - 1) of a request reads prompt + k tokens of context; the mean over its steps:
  const context = meanLength(opts.promptLen) + meanLength(opts.outputLen) / 2;
  return roofline(cells, modelBytes(config), context, hbm, adapterBytesOf);
}
