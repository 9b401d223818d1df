// The results table for a terminal: one row per cell, columns aligned, milliseconds for latency.
import { retentionRange, type CellReport } from './cell.js';
import { describeLoad } from './load.js';
import type { EngineCounters } from './options.js';
import type { PrefillReport } from './prefill.js';
import type { RooflineReport } from './roofline.js';
import { formatBytes } from './status_line.js';

export function formatMs(v: number | null): string {
  if (v === null) return '-';
  return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2);
}

export function formatPercent(v: number | null): string {
  return v === null ? '-' : `${(v * 100).toFixed(1)}%`;
}

/** Retention, and over rounds that differ the range of the rounds' own: `92.9% (90.1-95.3%)`. */
export function formatRetention(c: CellReport): string {
  const range = retentionRange(c);
  const pct = (v: number): string => (v * 100).toFixed(1);
  return range ? `${formatPercent(c.retention)} (${pct(range[0])}-${pct(range[1])}%)` : formatPercent(c.retention);
}

const COLUMNS: { head: string; cell: (c: CellReport) => string; left?: boolean }[] = [
  { head: 'engine', cell: (c) => c.engine, left: true },
  { head: 'mix', cell: (c) => c.mix, left: true },
  { head: 'load', cell: (c) => describeLoad(c.load), left: true },
  { head: 'req', cell: (c) => String(c.requests) },
  { head: 'fail', cell: (c) => String(c.failed) },
  { head: 'tok/s', cell: (c) => c.outputTokS.toFixed(c.outputTokS >= 100 ? 0 : 1) },
  { head: 'retention', cell: formatRetention },
  { head: 'TTFT p50', cell: (c) => formatMs(c.ttftMs.p50) },
  { head: 'TTFT p99', cell: (c) => formatMs(c.ttftMs.p99) },
  { head: 'ITL p50', cell: (c) => formatMs(c.itlMs.p50) },
  { head: 'ITL p99', cell: (c) => formatMs(c.itlMs.p99) },
  { head: 'TPOT p50', cell: (c) => formatMs(c.tpotMs.p50) },
  { head: 'e2e p50', cell: (c) => formatMs(c.e2eMs.p50) },
  { head: 'e2e p99', cell: (c) => formatMs(c.e2eMs.p99) },
];

/** Latency columns are in milliseconds. */
export function formatTable(cells: readonly CellReport[]): string {
  const rows = [COLUMNS.map((c) => c.head), ...cells.map((cell) => COLUMNS.map((c) => c.cell(cell)))];
  const widths = COLUMNS.map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  const line = (r: string[]): string =>
    r.map((v, i) => (COLUMNS[i].left ? v.padEnd(widths[i]) : v.padStart(widths[i]))).join('  ').trimEnd();
  const rule = widths.map((w) => '-'.repeat(w)).join('  ');
  return [line(rows[0]), rule, ...rows.slice(1).map(line)].join('\n');
}

/** One line per c=1 cell: measured step (TPOT p50), bandwidth floor, achieved fraction. */
export function formatRoofline(r: RooflineReport): string {
  const head = `roofline at c=1, HBM ${r.hbmGbps.toFixed(0)} GB/s (${r.hbmSource}): weights ${formatBytes(r.weightBytes)} + KV ` +
    `${formatBytes(r.kvBytesPerToken * r.contextTokens)} (${r.contextTokens.toFixed(0)} tokens) per step`;
  if (r.cells.length === 0) return `${head}\n  no c=1 cell with a measured decode step`;
  return [head, ...r.cells.map((c) =>
    `  ${c.engine.padEnd(8)} ${c.mix.padEnd(5)}  step ${formatMs(c.stepMs)} ms (ITL p50 ${formatMs(c.itlMs)}), floor ${formatMs(c.floorMs)} ms` +
    `${c.adapterBytes > 0 ? ` (adapter ${formatBytes(c.adapterBytes)})` : ''} -> ${formatPercent(c.fraction)} of bandwidth`)].join('\n');
}

/** One line per engine and mix: the long prompt's TTFT p50, achieved TFLOP/s and share of the peak. */
export function formatPrefill(r: PrefillReport): string {
  const head = `prefill of ${r.tokens} tokens alone (${(r.flops / 1e12).toFixed(2)} TFLOP), bf16 peak ${r.peakTflops} TFLOP/s`;
  if (r.cells.length === 0) return `${head}\n  no cell with a measured TTFT`;
  return [head, ...r.cells.map((c) =>
    `  ${c.engine.padEnd(8)} ${c.mix.padEnd(5)}  TTFT p50 ${formatMs(c.ttftMs)} ms -> ${c.tflops.toFixed(1)} TFLOP/s, ${formatPercent(c.fraction)} of peak`)].join('\n');
}

/** One line per engine: its steps and preemptions, and the adapter pool's work. */
export function formatCounters(engines: readonly EngineCounters[]): string {
  return engines.map((e) => `${e.engine}: ${e.steps} steps, ${e.preemptions} preemptions` + (e.lora
    ? `; adapter pool: ${e.lora.loads} slot loads (${(e.lora.loadSeconds * 1e3).toFixed(1)} ms of host time to start them), ` +
      `${e.lora.evictions} evictions, ${e.lora.turns} time-slice hand-overs, ${e.lora.merges} merges into the weights ` +
      `(${e.lora.mergedSteps} steps merged)${autoCosts(e.lora)}`
    : '')).join('\n');
}

/** What merge_after_steps 'auto' measured, where it ran. */
function autoCosts(lora: NonNullable<EngineCounters['lora']>): string {
  if (lora.mergeMs === undefined) return '';
  const overheads = lora.stepOverheadMs?.map((o) => `${o.ms.toFixed(3)} ms at ${o.rows} row${o.rows > 1 ? 's' : ''}`).join(', ');
  return `; auto: a merge and its unmerge ${lora.mergeMs.toFixed(2)} ms, adapter overhead a step ${overheads || 'not known'}`;
}
