// `mstar bench`: load any OpenAI-compatible endpoint (ours, vLLM, SGLang) the same way and report
// throughput, latency and LoRA retention as a table, JSON and an SVG chart.
import { writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';

import { ConfigError } from '../config/load.js';
import { parseLength, type LengthDist } from '../bench/lengths.js';
import { isMix, MIXES, MIX_HELP, type MixName } from '../bench/mix.js';
import type { BenchOptions, BenchTarget } from '../bench/options.js';
import { DEFAULT_PEAK_TFLOPS } from '../bench/prefill.js';
import { DEFAULT_HBM_GBPS } from '../bench/hbm.js';
import { BenchError, runBenchmark } from '../bench/run.js';
import { StatusLine } from '../bench/status_line.js';
import { chartSvg } from '../bench/svg.js';
import { formatCounters, formatPrefill, formatRoofline, formatTable } from '../bench/table.js';

export const BENCH_HELP = `usage: mstar bench (--serve serve.yaml | --url URL [--model NAME]) [options]

Measures output tok/s, TTFT, inter-token latency and end-to-end latency per adapter mix and
load point, and retention: tok/s ÷ tok/s of the same engine with LoRA off.

target:
      --serve FILE           start mstar in this process from serve.yaml, twice: as written
                             (LoRA on), then without resources.lora (LoRA off, for retention)
      --url URL              any OpenAI-compatible server (mstar, vLLM, SGLang)
      --model NAME           its base model (default: from /v1/models)
      --baseline-url URL     the same model served with LoRA off, for retention (url mode)
      --baseline-model NAME  its model name (default: --model)
      --api-key KEY          sent as a Bearer token
      --vocab N              prompt token ids are drawn below N (url mode; default 30000)

load:
      --concurrency LIST     closed-loop clients per cell (default 1,32,64; none if only --rate)
      --rate LIST            Poisson arrivals, requests per second
      --prompt-len N|A:B     prompt tokens: fixed, or uniform in [A, B] (default 128)
      --output-len N|A:B     output tokens, exact (ignore_eos) (default 128)
      --requests N           requests per cell and round (default max(16, 4c); Poisson max(16, 10·rate))
      --duration S           instead: send for S seconds per cell and round
      --mix LIST             adapter mixes (default ${MIXES.join(',')}):
${MIXES.map((m) => `                               ${m.padEnd(6)} ${MIX_HELP[m]}`).join('\n')}
      --adapters LIST        adapter names (default: the YAML's, or /v1/models' entries with a parent)
      --rounds N             measure each side N times, the sides taking turns to go first (default 1);
                             retention then also shows the range of the rounds' own
      --seed S               prompts, lengths and arrivals (default 0)

output:
      --json FILE            the full report
      --svg FILE             chart: retention and TTFT p50 by load point, a line per mix
      --roofline             with --serve: (weight + KV bytes) / HBM bandwidth ÷ the c=1 decode
                             step (TPOT p50): the share of bandwidth decode achieves
      --hbm-gbps N           bandwidth for --roofline (default: measured on the server's GPU
                             by a read-only kernel; without one, ${DEFAULT_HBM_GBPS}, an H200's datasheet)
      --prefill N            with --serve: one more cell per engine, 8 prompts of N tokens alone
                             (c=1, one output token): prefill FLOPs ÷ TTFT p50 ÷ the bf16 peak;
                             with LoRA on, also on the first adapter (its FLOPs not counted)
      --peak-tflops N        bf16 peak for --prefill (default ${DEFAULT_PEAK_TFLOPS}, an H200)
  -h, --help                 show this help

Exits 1 when any request failed (the report is still written), 2 on a usage error.
`;

const OPTIONS = {
  serve: { type: 'string' },
  url: { type: 'string' },
  model: { type: 'string' },
  'baseline-url': { type: 'string' },
  'baseline-model': { type: 'string' },
  'api-key': { type: 'string' },
  vocab: { type: 'string' },
  concurrency: { type: 'string' },
  rate: { type: 'string' },
  'prompt-len': { type: 'string' },
  'output-len': { type: 'string' },
  requests: { type: 'string' },
  duration: { type: 'string' },
  mix: { type: 'string' },
  adapters: { type: 'string' },
  rounds: { type: 'string' },
  seed: { type: 'string' },
  json: { type: 'string' },
  svg: { type: 'string' },
  roofline: { type: 'boolean' },
  'hbm-gbps': { type: 'string' },
  prefill: { type: 'string' },
  'peak-tflops': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

type Values = ReturnType<typeof parseArgs<{ args: string[]; options: typeof OPTIONS }>>['values'];

class UsageError extends Error {}

const list = (s: string): string[] => s.split(',').map((x) => x.trim()).filter(Boolean);

function positiveInts(text: string, flag: string): number[] {
  const out = list(text).map(Number);
  if (out.length === 0 || !out.every((n) => Number.isSafeInteger(n) && n >= 1)) throw new UsageError(`${flag} expects positive integers, got ${JSON.stringify(text)}`);
  return out;
}

function positiveNumbers(text: string, flag: string): number[] {
  const out = list(text).map(Number);
  if (out.length === 0 || !out.every((n) => Number.isFinite(n) && n > 0)) throw new UsageError(`${flag} expects positive numbers, got ${JSON.stringify(text)}`);
  return out;
}

function nonNegativeInt(text: string, flag: string): number {
  if (!/^\d+$/.test(text)) throw new UsageError(`${flag} expects an integer >= 0, got ${JSON.stringify(text)}`);
  return Number(text);
}

function length(text: string | undefined, flag: string): LengthDist {
  const d = parseLength(text ?? '128');
  if (d === undefined) throw new UsageError(`${flag} expects N or MIN:MAX, got ${JSON.stringify(text)}`);
  return d;
}

/** A flag that takes one value: a list is a mistake, not its first item. */
function one<T>(values: T[], flag: string): T {
  if (values.length !== 1) throw new UsageError(`${flag} takes one value, got ${values.length}`);
  return values[0];
}

/** Load points in the order given, each once (a repeat would pool two runs into each of two cells). */
function unique<T>(values: T[]): T[] {
  return [...new Set(values)];
}

function optionsOf(v: Values): BenchOptions {
  if ((v.serve === undefined) === (v.url === undefined)) throw new UsageError('give exactly one of --serve serve.yaml or --url URL');
  if (v.requests !== undefined && v.duration !== undefined) throw new UsageError('give --requests or --duration, not both');
  const target: BenchTarget = v.serve !== undefined
    ? { kind: 'serve', configFile: v.serve }
    : {
      kind: 'url', url: v.url!.replace(/\/+$/, ''), model: v.model, baselineUrl: v['baseline-url']?.replace(/\/+$/, ''),
      baselineModel: v['baseline-model'], apiKey: v['api-key'], vocab: v.vocab === undefined ? 30000 : one(positiveInts(v.vocab, '--vocab'), '--vocab'),
    };
  const mixes = list(v.mix ?? MIXES.join(','));
  const unknown = mixes.find((m) => !isMix(m));
  if (unknown !== undefined) throw new UsageError(`--mix: unknown mix ${JSON.stringify(unknown)} (known: ${MIXES.join(', ')})`);
  const rates = v.rate === undefined ? [] : unique(positiveNumbers(v.rate, '--rate'));
  if (v.serve !== undefined) {
    const urlOnly = (['model', 'baseline-url', 'baseline-model', 'vocab'] as const).filter((k) => v[k] !== undefined);
    if (urlOnly.length > 0) throw new UsageError(`--${urlOnly[0]} goes with --url, not --serve (the server's config says it)`);
  }
  return {
    target,
    adapters: v.adapters === undefined ? undefined : list(v.adapters),
    concurrency: v.concurrency !== undefined ? unique(positiveInts(v.concurrency, '--concurrency')) : rates.length > 0 ? [] : [1, 32, 64],
    rates,
    promptLen: length(v['prompt-len'], '--prompt-len'),
    outputLen: length(v['output-len'], '--output-len'),
    requests: v.requests === undefined ? undefined : one(positiveInts(v.requests, '--requests'), '--requests'),
    durationS: v.duration === undefined ? undefined : one(positiveNumbers(v.duration, '--duration'), '--duration'),
    mixes: [...new Set(mixes)] as MixName[],
    rounds: v.rounds === undefined ? 1 : one(positiveInts(v.rounds, '--rounds'), '--rounds'),
    seed: v.seed === undefined ? 0 : nonNegativeInt(v.seed, '--seed'),
    roofline: v.roofline === true,
    hbmGbps: v['hbm-gbps'] === undefined ? undefined : one(positiveNumbers(v['hbm-gbps'], '--hbm-gbps'), '--hbm-gbps'),
    prefill: v.prefill === undefined ? undefined : one(positiveInts(v.prefill, '--prefill'), '--prefill'),
    peakTflops: v['peak-tflops'] === undefined ? DEFAULT_PEAK_TFLOPS : one(positiveNumbers(v['peak-tflops'], '--peak-tflops'), '--peak-tflops'),
  };
}

export async function runBench(args: string[]): Promise<number> {
  const fail = (message: string): number => {
    process.stderr.write(`mstar bench: ${message}\n`);
    return 2;
  };
  let values: Values;
  try {
    ({ values } = parseArgs({ args, options: OPTIONS, allowPositionals: false, strict: true }));
  } catch (e) {
    return fail(`${(e as Error).message}\n\n${BENCH_HELP}`);
  }
  if (values.help) {
    process.stdout.write(BENCH_HELP);
    return 0;
  }
  let opts: BenchOptions;
  try {
    opts = optionsOf(values);
  } catch (e) {
    if (e instanceof UsageError) return fail(e.message);
    throw e;
  }

  const status = new StatusLine(process.stdout);
  let report;
  try {
    report = await runBenchmark(opts, { status: (line) => status.update(line), log: (line) => status.log(line) });
  } catch (e) {
    status.clear();
    if (e instanceof ConfigError || e instanceof BenchError) return fail(e.message);
    throw e;
  }
  status.clear();
  const out = (s: string): void => void process.stdout.write(`${s}\n`);
  out('');
  out(`${report.target.model} @ ${report.target.url}  prompt ${report.settings.promptLen}, output ${report.settings.outputLen} tokens; latencies in ms`);
  out(formatTable(report.cells));
  if (report.roofline !== null) out(`\n${formatRoofline(report.roofline)}`);
  if (report.prefill !== null) out(`\n${formatPrefill(report.prefill)}`);
  if (report.engines !== null) out(`\n${formatCounters(report.engines)}`);
  if (values.json !== undefined) {
    await writeFile(values.json, `${JSON.stringify(report, null, 2)}\n`);
    out(`wrote ${values.json}`);
  }
  if (values.svg !== undefined) {
    const title = `mstar bench: ${report.target.model}${report.target.device ? ` (${report.target.device})` : ''}, ` +
      `prompt ${report.settings.promptLen}, output ${report.settings.outputLen}`;
    await writeFile(values.svg, chartSvg(report.cells, title));
    out(`wrote ${values.svg}`);
  }
  return report.cells.some((c) => c.failed > 0) ? 1 : 0;
}
