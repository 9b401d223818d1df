// Percentiles as numpy computes them by default (linear interpolation between closest ranks),
// so numbers compare with vLLM's and SGLang's benchmark scripts.

/** The p-th percentile (0..100) of `values`; null when there are none. */
export function percentile(values: readonly number[], p: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return percentileOfSorted(sorted, p);
}

export function percentileOfSorted(sorted: readonly number[], p: number): number | null {
  if (sorted.length === 0) return null;
  const rank = (Math.min(100, Math.max(0, p)) / 100) * (sorted.length - 1);
  const lo = Math.floor(rank);
  const hi = Math.ceil(rank);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo);
}

export interface Summary {
  p50: number | null;
  p90: number | null;
  p99: number | null;
  mean: number | null;
}

export function summarize(values: readonly number[]): Summary {
  const sorted = [...values].sort((a, b) => a - b);
  const mean = sorted.length === 0 ? null : sorted.reduce((a, v) => a + v, 0) / sorted.length;
  return { p50: percentileOfSorted(sorted, 50), p90: percentileOfSorted(sorted, 90), p99: percentileOfSorted(sorted, 99), mean };
}
