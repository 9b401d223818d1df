// What `mstar bench` is asked to measure, and the JSON report it writes.
import type { CellReport, EngineSide } from './cell.js';
import type { LengthDist } from './lengths.js';
import type { LoadShape } from './load.js';
import type { MixName } from './mix.js';
import type { PrefillReport } from './prefill.js';
import type { RooflineReport } from './roofline.js';

export type BenchTarget =
  /** Our server, started in-process from serve.yaml: LoRA on, then LoRA off. */
  | { kind: 'serve'; configFile: string }
  /** Any OpenAI-compatible endpoint; a second one (LoRA off) gives retention. */
  | { kind: 'url'; url: string; model?: string; baselineUrl?: string; baselineModel?: string; apiKey?: string; vocab: number };

export interface BenchOptions {
  target: BenchTarget;
  /** Adapter names; by default the YAML's (serve) or /v1/models' (url). */
  adapters?: string[];
  concurrency: number[];
  rates: number[];
  promptLen: LengthDist;
  outputLen: LengthDist;
  /** Requests per cell and round; by default max(16, 4c) closed-loop, max(16, 10·rate) Poisson. */
  requests?: number;
  /** Instead of a request count: send for this long per cell and round. */
  durationS?: number;
  mixes: MixName[];
  rounds: number;
  seed: number;
  roofline: boolean;
  /** Bandwidth for the roofline, GB/s; undefined: measured on the server's GPU (see hbm.ts). */
  hbmGbps?: number;
  /** Prompt tokens of the prefill cell (serve only); undefined: none. */
  prefill?: number;
  peakTflops: number;
}

export interface BenchReport {
  tool: 'mstar bench';
  version: 1;
  startedAt: string;
  target: {
    kind: BenchTarget['kind'];
    url: string;
    baselineUrl: string | null;
    model: string;
    adapters: string[];
    /** serve only: the YAML, the device and the adapter slots. */
    serveConfig?: string;
    device?: string;
    slots?: number;
  };
  settings: {
    concurrency: number[];
    rates: number[];
    promptLen: string;
    outputLen: string;
    requests: number | null;
    durationS: number | null;
    mixes: MixName[];
    rounds: number;
    seed: number;
  };
  /** LoRA-on cells of every mix, then the LoRA-off baseline cells (mix 'base'). */
  cells: CellReport[];
  roofline: RooflineReport | null;
  prefill: PrefillReport | null;
  /** serve only: each engine's counters over its whole run (warm-up included). */
  engines: EngineCounters[] | null;
}

export interface EngineCounters {
  engine: EngineSide;
  steps: number;
  preemptions: number;
  /**
   * The adapter pool: slot loads, evictions, time-slice hand-overs, host seconds starting
   * loads, merges and the steps run merged; with merge_after_steps 'auto', what it measured
   * as of the last round (EngineStats' mergeMs and stepOverheadMs).
   */
  lora?: {
    loads: number; evictions: number; turns: number; loadSeconds: number; merges: number; mergedSteps: number;
    mergeMs?: number; stepOverheadMs?: { rows: number; ms: number }[];
  };
}

export function defaultRequests(load: LoadShape): number {
  return load.kind === 'closed' ? Math.max(16, 4 * load.concurrency) : Math.max(16, Math.ceil(10 * load.rate));
}
