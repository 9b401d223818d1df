// One cell of the benchmark grid (an engine side × an adapter mix × a load point), summarised
// over its rounds: throughput, latency percentiles, failures, and retention once the LoRA-off
// baseline of the same load point is known.
import type { LoadRun, LoadShape } from './load.js';
import type { MixName } from './mix.js';
import { summarize, type Summary } from './percentiles.js';

/** 'lora-on': the engine under test (LoRA enabled); 'lora-off': the same engine without LoRA (or --baseline-url). */
export type EngineSide = 'lora-on' | 'lora-off';

export interface CellReport {
  engine: EngineSide;
  mix: MixName;
  load: LoadShape;
  rounds: number;
  requests: number;
  failed: number;
  /** Up to 5 distinct error messages of failed requests. */
  errors: string[];
  /** Requests that ended with fewer tokens than asked (an engine that ignored ignore_eos). */
  shortOutputs: number;
  outputTokens: number;
  /** Wall time of all rounds together, seconds. */
  durationS: number;
  /** Output tokens per second: the mean over rounds. */
  outputTokS: number;
  roundTokS: number[];
  requestsPerS: number;
  ttftMs: Summary;
  itlMs: Summary;
  /** Time per output token after the first: (e2e - TTFT) / (tokens - 1), per request. */
  tpotMs: Summary;
  e2eMs: Summary;
  /** outputTokS ÷ the lora-off cell's at the same load point; null without a baseline. */
  retention: number | null;
  /**
   * Each round's tok/s ÷ the baseline's in the same round (the two sides measured back to back),
   * so that a reader sees how far one round's retention moves; empty without a baseline.
   */
  roundRetention: number[];
}

const MAX_ERRORS = 5;

export function cellReport(engine: EngineSide, mix: MixName, load: LoadShape, runs: readonly LoadRun[]): CellReport {
  const all = runs.flatMap((r) => r.results);
  const ok = all.filter((r) => r.ok);
  const errors = [...new Set(all.filter((r) => !r.ok).map((r) => r.error ?? 'unknown error'))].slice(0, MAX_ERRORS);
  const tokens = (rs: typeof all): number => rs.reduce((a, r) => a + (r.ok ? r.outputTokens : 0), 0);
  const roundTokS = runs.map((r) => (r.wallS > 0 ? tokens(r.results) / r.wallS : 0));
  const durationS = runs.reduce((a, r) => a + r.wallS, 0);
  return {
    engine, mix, load,
    rounds: runs.length,
    requests: all.length,
    failed: all.length - ok.length,
    errors,
    shortOutputs: ok.filter((r) => r.outputTokens < r.requestedTokens).length,
    outputTokens: tokens(all),
    durationS,
    outputTokS: roundTokS.length === 0 ? 0 : roundTokS.reduce((a, v) => a + v, 0) / roundTokS.length,
    roundTokS,
    requestsPerS: durationS > 0 ? ok.length / durationS : 0,
    ttftMs: summarize(ok.map((r) => r.ttftMs!)),
    itlMs: summarize(ok.flatMap((r) => r.itlMs)),
    tpotMs: summarize(ok.filter((r) => r.outputTokens > 1).map((r) => (r.endMs - r.startMs - r.ttftMs!) / (r.outputTokens - 1))),
    e2eMs: summarize(ok.map((r) => r.endMs - r.startMs)),
    retention: null,
    roundRetention: [],
  };
}

/** The low and high of a cell's rounds' retention, where it has rounds that differ. */
export function retentionRange(c: CellReport): [number, number] | undefined {
  const low = Math.min(...c.roundRetention), high = Math.max(...c.roundRetention);
  return c.roundRetention.length > 1 && high > low ? [low, high] : undefined;
}

/** Same load point: retention compares a cell with the baseline cell that had the same shape. */
export function sameLoad(a: LoadShape, b: LoadShape): boolean {
  return a.kind === b.kind && (a.kind === 'closed' ? a.concurrency === (b as typeof a).concurrency : a.rate === (b as typeof a).rate);
}

export function withRetention(cells: readonly CellReport[], baseline: readonly CellReport[]): CellReport[] {
  return cells.map((c) => {
    const base = baseline.find((b) => sameLoad(b.load, c.load));
    if (base === undefined || !(base.outputTokS > 0)) return { ...c, retention: null, roundRetention: [] };
    const rounds = Math.min(c.roundTokS.length, base.roundTokS.length);
    const roundRetention = c.roundTokS.slice(0, rounds).flatMap((v, i) => (base.roundTokS[i] > 0 ? [v / base.roundTokS[i]] : []));
    return { ...c, retention: c.outputTokS / base.outputTokS, roundRetention };
  });
}
